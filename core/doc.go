// Package core implements the BabelQueue wire envelope: a byte-faithful codec
// for the cross-language JSON message contract (schema_version 1), the
// consumer-side schema-version gate and attempts reconciliation shared by every
// broker binding, and the dead-letter and redrive transformations.
//
// The envelope a producer writes looks like
//
//	{"job":"urn:babel:orders:created","trace_id":"…","data":{"order_id":1042},
//	 "meta":{"id":"…","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},
//	 "attempts":0}
//
// Decode keeps what it does not understand: unknown top-level and meta keys,
// and the data object, are carried as the exact JSON they arrived as and are
// written back unchanged by Encode, so retry, dead-letter and redrive never
// lose a field another SDK added, and integers beyond 2^53 are never squeezed
// through float64. Forbidden legacy keys (/timestamp, /meta/max_retries,
// /meta/attempts, /meta/source, /meta/ts) are reported through a warning hook
// and dropped.
//
// The broker-neutral runtime (publisher, consumer, retry, dead-lettering)
// lives in the queue sub-package; broker modules implement the interfaces of
// the driver sub-package.
package core
