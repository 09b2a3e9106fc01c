"""The metadata room: what a broker knows of topics, partitions, features and (on a
single node) ACLs, where it keeps it (`store`: the local metadata store and
meta.properties), the cache every request reads (`cache`), their value types
(`model`) and the facts about topics several rooms share (`topics`)."""
