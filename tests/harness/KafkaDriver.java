// KafkaDriver: drives a Kafka-protocol broker with the official Apache Kafka
// Java client, for kanal's compatibility tests.
//
// Run without compiling (Java 17 source-launch mode):
//   java -cp 'DEST/clients/*' KafkaDriver.java <command> <args...> [--config KEY=VALUE]...
// or compiled once:
//   javac -cp 'DEST/clients/*' -d OUT KafkaDriver.java
//   java -cp "OUT:DEST/clients/*" KafkaDriver <command> <args...>
//
// Commands (each prints one JSON object per line on stdout; logs go to stderr):
//   produce BOOTSTRAP TOPIC N COMPRESSION [idempotent]
//   consume BOOTSTRAP TOPIC GROUP N TIMEOUT_MS [read_committed]
//   admin   BOOTSTRAP [TOPIC]
//   txn     BOOTSTRAP TOPIC TXN_ID
// --config KEY=VALUE (repeatable, anywhere) is put into the client properties
// last, so it can add security settings (SASL/SCRAM, TLS) or override any
// default chosen here.
// Exit status: 0 on success, 1 on a failure (after a {"type":"error",...}
// line), 2 on bad usage.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KafkaDriver {

    public static void main(String[] argv) {
        // slf4j-simple reads these when the first logger is made: keep the
        // client's INFO chatter (config dumps) off, warnings still go to stderr.
        setDefault("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        setDefault("org.slf4j.simpleLogger.logFile", "System.err");

        List<String> args = new ArrayList<>();
        Map<String, String> overrides = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            String kv = null;
            if (a.equals("--config")) {
                if (i + 1 >= argv.length) usage("--config needs KEY=VALUE");
                kv = argv[++i];
            } else if (a.startsWith("--config=")) {
                kv = a.substring("--config=".length());
            }
            if (kv != null) {
                int eq = kv.indexOf('=');
                if (eq <= 0) usage("--config needs KEY=VALUE, got: " + kv);
                overrides.put(kv.substring(0, eq), kv.substring(eq + 1));
            } else {
                args.add(a);
            }
        }
        if (args.isEmpty()) usage("no command");
        long t0 = System.nanoTime();
        String cmd = args.get(0);
        try {
            switch (cmd) {
                case "produce" -> produce(args, overrides);
                case "consume" -> consume(args, overrides);
                case "admin" -> admin(args, overrides);
                case "txn" -> txn(args, overrides);
                default -> usage("unknown command: " + cmd);
            }
        } catch (Exception e) {
            Throwable c = (e instanceof ExecutionException && e.getCause() != null) ? e.getCause() : e;
            emit(obj("type", "error", "command", cmd, "exception", c.getClass().getName(),
                     "message", String.valueOf(c.getMessage())));
            c.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
        emit(obj("type", "done", "command", cmd, "elapsed_ms", (System.nanoTime() - t0) / 1_000_000));
        System.out.flush();
        // Kafka's client threads are not daemons only while a client is open;
        // all are closed here, but exit explicitly so a stray thread never hangs us.
        System.exit(0);
    }

    // ---------------------------------------------------------------- produce

    static void produce(List<String> a, Map<String, String> overrides) throws Exception {
        need(a, 5, "produce BOOTSTRAP TOPIC N COMPRESSION [idempotent]");
        String bootstrap = a.get(1), topic = a.get(2), compression = a.get(4);
        int n = Integer.parseInt(a.get(3));
        boolean idempotent = a.size() > 5 && a.get(5).equals("idempotent");

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(idempotent));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putAll(overrides);

        Map<Integer, List<Long>> offsets = new TreeMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, "k" + i, "v" + i);
                r.headers().add("h", String.valueOf(i).getBytes(StandardCharsets.UTF_8));
                futures.add(producer.send(r));
            }
            producer.flush();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata md = f.get();
                offsets.computeIfAbsent(md.partition(), k -> new ArrayList<>()).add(md.offset());
            }
        }
        for (Map.Entry<Integer, List<Long>> e : offsets.entrySet()) {
            List<Long> o = e.getValue();
            emit(obj("type", "acked", "topic", topic, "partition", e.getKey(), "count", o.size(),
                     "first_offset", Collections.min(o), "last_offset", Collections.max(o),
                     "offsets", o));
        }
        emit(obj("type", "produced", "topic", topic, "count", n, "compression", compression,
                 "idempotent", idempotent));
    }

    // ---------------------------------------------------------------- consume

    static void consume(List<String> a, Map<String, String> overrides) throws Exception {
        need(a, 6, "consume BOOTSTRAP TOPIC GROUP N TIMEOUT_MS [read_committed]");
        String bootstrap = a.get(1), topic = a.get(2), group = a.get(3);
        int n = Integer.parseInt(a.get(4));
        long timeoutMs = Long.parseLong(a.get(5));
        boolean readCommitted = a.size() > 6 && a.get(6).equals("read_committed");

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, readCommitted ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.putAll(overrides);

        int count = 0;
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            while (count < n) {
                long left = (deadline - System.nanoTime()) / 1_000_000L;
                if (left <= 0) break;
                ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(Math.min(left, 500)));
                for (ConsumerRecord<String, String> r : recs) {
                    Map<String, Object> headers = new LinkedHashMap<>();
                    List<Object> headerList = new ArrayList<>();
                    for (Header h : r.headers()) {
                        String v = h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8);
                        headers.put(h.key(), v);
                        headerList.add(List.of(h.key(), v == null ? "" : v));
                    }
                    emit(obj("type", "record", "topic", r.topic(), "partition", r.partition(),
                             "offset", r.offset(), "key", r.key(), "value", r.value(),
                             "headers", headers, "timestamp", r.timestamp(),
                             "timestamp_type", r.timestampType().toString(),
                             "leader_epoch", r.leaderEpoch().orElse(null)));
                    count++;
                }
            }
            // Commit the consumer's positions: everything delivered by poll()
            // (all records printed above; a read_committed position may also
            // be past abort markers and aborted records).
            consumer.commitSync(Duration.ofSeconds(30));
            Map<String, Object> committed = new TreeMap<>();
            var assigned = consumer.assignment();
            if (!assigned.isEmpty()) {
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e :
                        consumer.committed(assigned, Duration.ofSeconds(30)).entrySet()) {
                    committed.put(String.valueOf(e.getKey().partition()),
                                  e.getValue() == null ? null : e.getValue().offset());
                }
            }
            emit(obj("type", "consumed", "topic", topic, "group", group, "count", count,
                     "wanted", n, "timed_out", count < n, "committed", committed,
                     "isolation_level", readCommitted ? "read_committed" : "read_uncommitted"));
        }
    }

    // ---------------------------------------------------------------- admin

    static void admin(List<String> a, Map<String, String> overrides) throws Exception {
        need(a, 2, "admin BOOTSTRAP [TOPIC]");
        String bootstrap = a.get(1);
        String topic = a.size() > 2 ? a.get(2)
                : "kafkadriver-admin-" + UUID.randomUUID().toString().substring(0, 8);

        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        p.putAll(overrides);

        try (Admin admin = Admin.create(p)) {
            DescribeClusterResult dc = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node node : dc.nodes().get()) nodes.add(nodeJson(node));
            Node controller = dc.controller().get();
            emit(obj("type", "describe_cluster", "cluster_id", dc.clusterId().get(),
                     "controller", controller == null ? null : nodeJson(controller), "nodes", nodes));
            String brokerId = nodes.isEmpty() ? "1" : String.valueOf(dc.nodes().get().iterator().next().id());

            NewTopic nt = new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            admin.createTopics(List.of(nt)).all().get();
            emit(obj("type", "create_topics", "topic", topic, "partitions", 3, "replication_factor", 1));

            Collection<TopicListing> listing = retry(() -> admin.listTopics().listings().get(),
                    l -> l.stream().anyMatch(t -> t.name().equals(topic)));
            List<Object> names = new ArrayList<>();
            for (TopicListing t : listing) names.add(t.name());
            Collections.sort(names, (x, y) -> ((String) x).compareTo((String) y));
            emit(obj("type", "list_topics", "topics", names, "contains_created", names.contains(topic)));

            TopicDescription td = retry(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic),
                    d -> d != null && d.partitions().size() == 3);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : td.partitions()) {
                List<Object> replicas = new ArrayList<>();
                for (Node r : pi.replicas()) replicas.add(r.id());
                List<Object> isr = new ArrayList<>();
                for (Node r : pi.isr()) isr.add(r.id());
                parts.add(obj("partition", pi.partition(), "leader", pi.leader() == null ? null : pi.leader().id(),
                              "replicas", replicas, "isr", isr));
            }
            emit(obj("type", "describe_topics", "topic", td.name(), "topic_id", td.topicId().toString(),
                     "internal", td.isInternal(), "partitions", parts));

            ConfigResource tr = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            ConfigResource br = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
            Map<ConfigResource, Config> cfgs = admin.describeConfigs(List.of(tr, br)).all().get();
            Map<String, Object> topicCfg = new TreeMap<>();
            Map<String, Object> topicDynamic = new TreeMap<>();
            for (ConfigEntry e : cfgs.get(tr).entries()) {
                topicCfg.put(e.name(), e.isSensitive() ? "<sensitive>" : e.value());
                if (e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG) topicDynamic.put(e.name(), e.value());
            }
            emit(obj("type", "describe_configs", "resource", "topic", "name", topic,
                     "entries", topicCfg.size(), "dynamic", topicDynamic, "configs", topicCfg));
            Map<String, Object> brokerPick = new TreeMap<>();
            int brokerEntries = 0;
            for (ConfigEntry e : cfgs.get(br).entries()) {
                brokerEntries++;
                if (e.name().equals("log.retention.hours") || e.name().equals("num.partitions")
                        || e.name().equals("offsets.topic.replication.factor")
                        || e.name().equals("message.max.bytes") || e.name().equals("process.roles")) {
                    brokerPick.put(e.name(), e.value());
                }
            }
            emit(obj("type", "describe_configs", "resource", "broker", "name", brokerId,
                     "entries", brokerEntries, "some", brokerPick));

            admin.deleteTopics(List.of(topic)).all().get();
            boolean gone = false;
            long deadline = System.nanoTime() + 15_000_000_000L;
            while (!gone && System.nanoTime() < deadline) {
                gone = !admin.listTopics().names().get().contains(topic);
                if (!gone) Thread.sleep(100);
            }
            emit(obj("type", "delete_topics", "topic", topic, "gone_from_list", gone));
        }
    }

    static Map<String, Object> nodeJson(Node n) {
        return obj("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    interface Call<T> { T call() throws Exception; }
    interface Check<T> { boolean ok(T t); }

    /** Metadata reaches the broker a little after the controller commits it: retry briefly. */
    static <T> T retry(Call<T> call, Check<T> check) throws Exception {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (true) {
            try {
                T t = call.call();
                if (check.ok(t) || System.nanoTime() > deadline) return t;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException) || System.nanoTime() > deadline) throw e;
            }
            Thread.sleep(100);
        }
    }

    // ---------------------------------------------------------------- txn

    static void txn(List<String> a, Map<String, String> overrides) throws Exception {
        need(a, 4, "txn BOOTSTRAP TOPIC TXN_ID");
        String bootstrap = a.get(1), topic = a.get(2), txnId = a.get(3);

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putAll(overrides);

        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            emit(obj("type", "init_transactions", "transactional_id", txnId));
            for (String outcome : List.of("committed", "aborted")) {
                String prefix = outcome.equals("committed") ? "c" : "a";
                producer.beginTransaction();
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < 3; i++) {
                    ProducerRecord<String, String> r = new ProducerRecord<>(topic, prefix + "k" + i, prefix + "v" + i);
                    r.headers().add("txn", outcome.getBytes(StandardCharsets.UTF_8));
                    fs.add(producer.send(r));
                }
                producer.flush();
                List<Object> offs = new ArrayList<>();
                for (Future<RecordMetadata> f : fs) {
                    RecordMetadata md = f.get();
                    offs.add(obj("partition", md.partition(), "offset", md.offset()));
                }
                if (outcome.equals("committed")) producer.commitTransaction();
                else producer.abortTransaction();
                emit(obj("type", "transaction", "outcome", outcome, "topic", topic,
                         "transactional_id", txnId, "records", offs));
            }
        }
    }

    // ---------------------------------------------------------------- helpers

    static void need(List<String> a, int n, String usage) {
        if (a.size() < n) usage("usage: " + usage);
    }

    static void usage(String msg) {
        System.err.println(msg);
        System.err.println("commands: produce BOOTSTRAP TOPIC N COMPRESSION [idempotent] | "
                + "consume BOOTSTRAP TOPIC GROUP N TIMEOUT_MS [read_committed] | "
                + "admin BOOTSTRAP [TOPIC] | txn BOOTSTRAP TOPIC TXN_ID; option: --config KEY=VALUE (repeatable)");
        System.exit(2);
    }

    static void setDefault(String key, String value) {
        if (System.getProperty(key) == null) System.setProperty(key, value);
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static void emit(Map<String, Object> m) {
        StringBuilder sb = new StringBuilder();
        json(sb, m);
        System.out.println(sb);
    }

    static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String s) {
            quote(sb, s);
        } else if (v instanceof Boolean || v instanceof Integer || v instanceof Long || v instanceof Short) {
            sb.append(v);
        } else if (v instanceof Number num) {
            double d = num.doubleValue();
            sb.append(Double.isFinite(d) ? num.toString() : "null");
        } else if (v instanceof Map<?, ?> m) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) sb.append(',');
                first = false;
                quote(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection<?> c) {
            sb.append('[');
            boolean first = true;
            for (Object o : c) {
                if (!first) sb.append(',');
                first = false;
                json(sb, o);
            }
            sb.append(']');
        } else {
            quote(sb, v.toString());
        }
    }

    static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
                }
            }
        }
        sb.append('"');
    }
}
