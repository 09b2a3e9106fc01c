"""Security: listeners and their protocols, TLS, SASL authentication, principals
and ACL authorization (client quotas are the quota room's).

The network layer asks this room how a listener secures its connections and
who is on the other end; handlers ask it whether that principal may do what
it asks. It knows nothing of handlers or of where its data is kept: ACLs and
credentials reach it from the metadata store (one node) or ZooKeeper.
"""
