"""The project's one Kafka client layer, bottom to top: `config` (how a client reaches the broker),
`admin` (topics), `consumers` (kafka-python: partitions, ends, polled ranges, tails), `producers`
(kafka-python's, and the delivery every producer's sends go through), `rd_producer` (the nodes'
librdkafka producer), `clients` (the process's one cache of clients), `offsets` (offsets as
checkpoints name them), `ranges` (a reader's ranges: librdkafka for long ones) and `end_watch`
(partitions' ends followed by reading). Nodes, agents and tools reach the broker through it; the
broker's own set-up (services.kafka_setup, services.kafka_broker), Spark's Kafka source and the
load benchmarks' bare clients do not."""
