"""kanal mirror: copies topics, their configs and ACLs, and consumer groups' offsets from one cluster to
another, exactly once (MirrorMaker 2's semantics; README "Mirroring")."""
