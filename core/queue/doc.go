// Package queue is the broker-neutral BabelQueue runtime: a Publisher that
// builds and sends envelopes, and a Consumer that receives them through a
// driver, routes them by URN to handlers, and settles each one with the
// contract's retry, dead-letter and poison rules.
//
// Guarantees (at-least-once):
//   - a delivery is acknowledged only after its handler succeeded, or after
//     its retry copy or dead-letter copy was published successfully;
//   - when that publish fails, the delivery is released back to the broker
//     and the error is reported, never swallowed;
//   - a failed acknowledgement is reported, never treated as a handler
//     failure; a handler panic is a handler error (a retry), not a crash;
//   - poison (undecodable body, no URN, schema-version gate rejected) is
//     dead-lettered with reason "poison" and the original bytes, never
//     released in a loop;
//   - on shutdown the consumer stops receiving, lets in-flight handlers
//     finish within a deadline, and releases what it did not start.
package queue
