"""The Spark side of a node: the session, Spark's Kafka read of a batch, what Spark computes of
the parts (their stateless prefix and partial aggregates), and a part's past."""
