"""Client quotas (Kafka's ClientQuotaManager): the entities quotas are set on, the rates
measured per client, and the throttle times a client over its quota is given; where
users' and clients' configs are kept (`store`) and quota values as Kafka stores them
(`values`)."""
