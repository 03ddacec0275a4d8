"""kanal.net: reaching a kanal node: the HOST:PORT grammar and the gRPC channel options every client of a
kanal server (clients, brokers, controllers, Spark) uses. Imports kanal.v1 only."""
