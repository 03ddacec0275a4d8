"""kanal package."""
