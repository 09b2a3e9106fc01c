"""The metadata room: what a broker knows of topics, partitions, features and (on a
single node) ACLs, where it keeps it (`store`: the local metadata store and
meta.properties), the cache every request reads (`cache`), and their value types
(`model`)."""
