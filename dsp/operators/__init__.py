"""An incremental evaluator of base.plan trees over Arrow micro-batches. Pure: no I/O.

A node's shared runtime (dsp.runtime.shared) reads each input topic once per micro-batch and hands the
batch to every plan reading it; this module is what a plan does with it. Stateless operators
are vectorized (pyarrow.compute); an Aggregate folds each batch into per-group partials
(pyarrow's hash aggregation, then a merge per group, so the Python work is per group, not per
row) and emits a group once its input's *bound* has passed it.

A bound is the promise that no later row has an event time below it:
  - a raw source: the newest event time seen minus the source's lateness (Spark's watermark);
  - a source with progress markers: the smallest of its topics' latest markers (each child
    promises that its later rows start at or after its marker). Until every topic has sent one
    there is none, so a child that starts a little later than its siblings loses nothing; a
    topic still silent once the others have promised SILENT_CHILD_GRACE_MS past their first
    promise is left out (a child with no receptors must not stop its parent);
  - a windowed Aggregate: the start of the earliest window it can still emit;
  - an Aggregate keyed by its input's event time: its input's bound.
A window [s, e) is emitted when e <= bound, a group keyed by event time t when t < bound, and a
row whose event time is below the bound an Aggregate had before the batch is late: dropped and
counted. Unlike Spark, a batch's rows and the windows they close leave in the same micro-batch
(Spark closes them one batch later), and a parent's windows close as soon as the slowest
child's marker passes them — no fixed slack per level.

Data Triage: a raw reader over its node's latency target decodes only a sample of the records
it could not process in time (dsp.spark.kafka_source); their rows carry `weight` k (each stands for
k records' rows) and a batch that left records out a row of weight 0. A source passes the
weights on in hidden columns (WEIGHT, CLUSTER: the record a row came from) and reports the
event-time span of a triaged batch; an Aggregate folds counts and sums weighted (the
Horvitz-Thompson estimate), and an annotated one (`approximate`) says per group whether the
span touched its window (TRIAGED) and bounds its first count or sum (ERROR_BOUND): BOUND_Z
standard deviations of the estimate, the variance estimated from the sampled records as
sum over records of (k^2 - k) x (the record's share of the group)^2. A parent merging
annotated partials ORs the flags and adds the variances (children sample independently).

The whole evaluator pickles (dsp.runtime.shared saves it after each batch, so a restart resumes it).
"""
