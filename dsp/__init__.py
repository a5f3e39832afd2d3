"""A node's data stream processing, in three wings: `operators` (pure evaluators of base.plan
over Arrow micro-batches), `spark` (the Spark session, Kafka in and out, what Spark computes, the
past) and `runtime` (the node's runtime: inputs, parts, batches, checkpoint, archive, uplink).
Below them the small modules both use: `status` (what a runtime reports), `turns` and `poll_pace`
(how a process's lanes share it), `triage` (what an overloaded reader samples); `bottom_up` runs
parts in one process without Spark or Kafka, for tests and tools."""
