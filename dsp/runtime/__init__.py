"""A node's runtime: the parts fed from the node's one stream (`shared`), its inputs and the
lanes' batches (`inputs`, `process_stream`, `stream_batches`, `form_batches`, `lane_fetch`), the
parts (`parts`, `bounds`), exactly-once state (`checkpoint`, `unrepeated`), the archive and the
past (`archive`, `history_feed`), the uplink of a constrained link (`uplink`), and the drills'
fault points (`faults`)."""
