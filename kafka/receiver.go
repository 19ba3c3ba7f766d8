package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Receiver is a consumer-group member delivering records to the runtime with
// process-then-commit offsets. It implements driver.Receiver.
//
// Receive must be called from one goroutine (the runtime's receive loop);
// Ack and Release may be called from any.
type Receiver struct {
	cl     *kgo.Client
	group  string
	cfg    receiverConfig
	logger *slog.Logger

	pollMu sync.Mutex // held by Receive and Close

	mu         sync.Mutex
	cond       *sync.Cond
	parts      map[topicPartition]*partState
	lastCommit time.Time
	closed     bool
	killed     bool
}

type topicPartition struct {
	topic     string
	partition int32
}

type partState struct {
	key         string // ordering key handed to the runtime
	epoch       uint64 // bumped on rewind and revoke; stale acks are ignored
	inflight    []*slot
	commitAt    int64 // next offset to commit
	leaderEpoch int32
	dirty       bool
	rewind      *kgo.EpochOffset // to apply in the next Receive
	floor       int64            // drop records below this after a rewind
}

type slot struct {
	offset int64
	done   bool
}

type token struct {
	rec   *kgo.Record
	tp    topicPartition
	epoch uint64
	slot  *slot
}

// ReceiverOption configures a Receiver.
type ReceiverOption func(*receiverConfig)

type receiverConfig struct {
	kopts          []kgo.Opt
	pollWait       time.Duration
	commitInterval time.Duration
	revokeTimeout  time.Duration
	tiers          int
	logger         *slog.Logger
}

// WithConsumerClientOptions passes options to the franz-go client (SASL,
// TLS, FetchMaxWait, session timeout…); they apply after the Receiver's own.
func WithConsumerClientOptions(opts ...kgo.Opt) ReceiverOption {
	return func(c *receiverConfig) { c.kopts = append(c.kopts, opts...) }
}

// WithPollWait bounds how long one Receive waits for records (default 500ms).
func WithPollWait(d time.Duration) ReceiverOption { return func(c *receiverConfig) { c.pollWait = d } }

// WithCommitInterval sets how often settled offsets are committed (default
// 250ms). Offsets are also committed on revoke and on Close.
func WithCommitInterval(d time.Duration) ReceiverOption {
	return func(c *receiverConfig) { c.commitInterval = d }
}

// WithRevokeTimeout bounds how long a rebalance waits for in-flight records
// of revoked partitions to be settled before abandoning them to the new
// owner, which will receive them again (default 10s; keep it below the
// group's rebalance timeout).
func WithRevokeTimeout(d time.Duration) ReceiverOption {
	return func(c *receiverConfig) { c.revokeTimeout = d }
}

// WithRetryTierTopics also consumes the n delay-tier topics of every topic
// (see WithRetryTiers) and holds each tier record until its bq-delay has
// passed since its timestamp.
func WithRetryTierTopics(n int) ReceiverOption { return func(c *receiverConfig) { c.tiers = n } }

// WithReceiverLogger logs to l (default slog.Default()).
func WithReceiverLogger(l *slog.Logger) ReceiverOption {
	return func(c *receiverConfig) { c.logger = l }
}

// NewReceiver joins consumer group group on topics. A new group starts at
// the earliest offset, so messages published before the first member joined
// are not lost.
func NewReceiver(seeds []string, group string, topics []string, opts ...ReceiverOption) (*Receiver, error) {
	cfg := receiverConfig{pollWait: 500 * time.Millisecond, commitInterval: 250 * time.Millisecond, revokeTimeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	all := append([]string(nil), topics...)
	for _, t := range topics {
		all = append(all, RetryTopics(t, cfg.tiers)...)
	}
	r := &Receiver{group: group, cfg: cfg, logger: cfg.logger, parts: map[topicPartition]*partState{}}
	r.cond = sync.NewCond(&r.mu)
	kopts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(all...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
	}
	cl, err := kgo.NewClient(append(kopts, cfg.kopts...)...)
	if err != nil {
		return nil, fmt.Errorf("babelqueue/kafka: consumer client: %w", err)
	}
	r.cl = cl
	return r, nil
}

// Client returns the underlying franz-go client.
func (r *Receiver) Client() *kgo.Client { return r.cl }

// Capabilities implements driver.Receiver: Kafka has no native redelivery
// count, so retries republish; Release rewinds the partition (after pausing
// it for the delay).
func (r *Receiver) Capabilities() driver.Capabilities { return driver.Capabilities{} }

// Receive implements driver.Receiver.
func (r *Receiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, driver.ErrClosed
	}
	r.applyRewinds()
	r.maybeCommit(ctx, false)
	r.cl.AllowRebalance()

	pctx, cancel := context.WithTimeout(ctx, r.cfg.pollWait)
	fetches := r.cl.PollRecords(pctx, max)
	cancel()
	if fetches.IsClientClosed() {
		return nil, driver.ErrClosed
	}
	var ferr error
	fetches.EachError(func(topic string, p int32, err error) {
		if ferr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			ferr = fmt.Errorf("babelqueue/kafka: fetching %s[%d]: %w", topic, p, err)
		}
	})

	now := time.Now()
	var out []*driver.Delivery
	r.mu.Lock()
	fetches.EachRecord(func(rec *kgo.Record) {
		tp := topicPartition{rec.Topic, rec.Partition}
		st := r.state(tp)
		if st.rewind != nil || rec.Offset < st.floor {
			return // the partition is being rewound; this record comes again
		}
		if due, ok := r.heldUntil(rec); ok && due.After(now) {
			r.rewindLocked(tp, st, rec, -1)
			r.pauseFor(tp, due.Sub(now))
			return
		}
		s := &slot{offset: rec.Offset}
		st.inflight = append(st.inflight, s)
		out = append(out, r.delivery(rec, tp, st, s))
	})
	r.mu.Unlock()
	if len(out) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, ferr
	}
	if ferr != nil {
		r.logger.Warn("babelqueue/kafka: fetch error", slog.Any("error", ferr))
	}
	return out, nil
}

func (r *Receiver) state(tp topicPartition) *partState {
	st := r.parts[tp]
	if st == nil {
		st = &partState{key: tp.topic + "/" + strconv.Itoa(int(tp.partition)), commitAt: -1}
		r.parts[tp] = st
	}
	return st
}

// heldUntil returns when a delay-tier record becomes due.
func (r *Receiver) heldUntil(rec *kgo.Record) (time.Time, bool) {
	if r.cfg.tiers == 0 {
		return time.Time{}, false
	}
	v, ok := header(rec, HeaderDelay)
	if !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return rec.Timestamp.Add(time.Duration(ms) * time.Millisecond), true
}

func (r *Receiver) delivery(rec *kgo.Record, tp topicPartition, st *partState, s *slot) *driver.Delivery {
	headers := make(map[string]string, len(rec.Headers))
	for _, h := range rec.Headers {
		headers[h.Key] = string(h.Value)
	}
	queue := rec.Topic
	if orig, ok := headers[HeaderOriginalTopic]; ok && strings.HasPrefix(rec.Topic, orig+".retry.") {
		queue = orig
	}
	att, hasAtt := headers[HeaderAttempts]
	sv, hasSV := headers[HeaderSchemaVersion]
	return &driver.Delivery{
		Body:        rec.Value,
		Queue:       queue,
		Headers:     headers,
		Native:      NativeAttempts(att, hasAtt),
		Gate:        Gate(sv, hasSV),
		OrderingKey: st.key,
		Token:       &token{rec: rec, tp: tp, epoch: st.epoch, slot: s},
	}
}

func (r *Receiver) tokenOf(d *driver.Delivery) (*token, error) {
	tok, ok := d.Token.(*token)
	if !ok {
		return nil, fmt.Errorf("babelqueue/kafka: foreign delivery token %T", d.Token)
	}
	return tok, nil
}

// Ack implements driver.Receiver: the record's offset becomes committable
// once every earlier record of its partition is settled too. Acks of records
// whose partition was since rewound or revoked are ignored: those records
// are delivered again.
func (r *Receiver) Ack(_ context.Context, d *driver.Delivery) error {
	tok, err := r.tokenOf(d)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.parts[tok.tp]
	if st == nil || st.epoch != tok.epoch {
		return nil
	}
	tok.slot.done = true
	for len(st.inflight) > 0 && st.inflight[0].done {
		st.commitAt = st.inflight[0].offset + 1
		st.inflight = st.inflight[1:]
		st.dirty = true
	}
	st.leaderEpoch = tok.rec.LeaderEpoch
	r.cond.Broadcast()
	return nil
}

// Release implements driver.Receiver: the partition is rewound to the
// record, so it and every later record of the partition are delivered again
// (nothing past it is committed meanwhile). With a delay the partition is
// paused that long first.
func (r *Receiver) Release(_ context.Context, d *driver.Delivery, delay time.Duration) error {
	tok, err := r.tokenOf(d)
	if err != nil {
		return err
	}
	r.mu.Lock()
	st := r.parts[tok.tp]
	if st == nil || st.epoch != tok.epoch {
		r.mu.Unlock()
		return nil
	}
	r.rewindLocked(tok.tp, st, tok.rec, indexOf(st.inflight, tok.slot))
	r.mu.Unlock()
	if delay > 0 {
		r.pauseFor(tok.tp, delay)
	}
	return nil
}

func indexOf(ss []*slot, s *slot) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return len(ss)
}

// rewindLocked schedules a rewind of tp to rec and forgets in-flight slots
// from index i on (i < 0: none were handed out for rec). r.mu must be held.
func (r *Receiver) rewindLocked(tp topicPartition, st *partState, rec *kgo.Record, i int) {
	st.epoch++
	if i >= 0 && i < len(st.inflight) {
		st.inflight = st.inflight[:i]
	}
	if st.rewind == nil || rec.Offset < st.rewind.Offset {
		st.rewind = &kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset}
	}
	r.cond.Broadcast()
}

func (r *Receiver) pauseFor(tp topicPartition, d time.Duration) {
	m := map[string][]int32{tp.topic: {tp.partition}}
	r.cl.PauseFetchPartitions(m)
	time.AfterFunc(d, func() { r.cl.ResumeFetchPartitions(m) })
}

// applyRewinds seeks rewound partitions; it runs in Receive, between polls,
// where no revoke can run concurrently (BlockRebalanceOnPoll).
func (r *Receiver) applyRewinds() {
	r.mu.Lock()
	var set map[string]map[int32]kgo.EpochOffset
	for tp, st := range r.parts {
		if st.rewind == nil {
			continue
		}
		if set == nil {
			set = map[string]map[int32]kgo.EpochOffset{}
		}
		if set[tp.topic] == nil {
			set[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		set[tp.topic][tp.partition] = *st.rewind
		st.floor = st.rewind.Offset
		st.rewind = nil
	}
	r.mu.Unlock()
	if set != nil {
		r.cl.SetOffsets(set)
	}
}

// maybeCommit commits settled offsets when the interval has passed (or
// always with force).
func (r *Receiver) maybeCommit(ctx context.Context, force bool) {
	r.mu.Lock()
	if !force && time.Since(r.lastCommit) < r.cfg.commitInterval {
		r.mu.Unlock()
		return
	}
	r.lastCommit = time.Now()
	offsets := r.dirtyLocked(nil)
	r.mu.Unlock()
	r.commit(ctx, offsets)
}

// dirtyLocked collects committable offsets (of only the given partitions
// when only is non-nil) and clears their dirty flags.
func (r *Receiver) dirtyLocked(only map[string][]int32) map[string]map[int32]kgo.EpochOffset {
	var out map[string]map[int32]kgo.EpochOffset
	for tp, st := range r.parts {
		if !st.dirty || (only != nil && !contains(only[tp.topic], tp.partition)) {
			continue
		}
		if out == nil {
			out = map[string]map[int32]kgo.EpochOffset{}
		}
		if out[tp.topic] == nil {
			out[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		out[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: st.leaderEpoch, Offset: st.commitAt}
		st.dirty = false
	}
	return out
}

func contains(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func (r *Receiver) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) {
	if len(offsets) == 0 {
		return
	}
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode != 0 {
						err = fmt.Errorf("partition %s[%d]: error code %d", t.Topic, p.Partition, p.ErrorCode)
					}
				}
			}
		}
		if err != nil {
			r.logger.Warn("babelqueue/kafka: commit failed; offsets will be committed again", slog.Any("error", err))
			r.mu.Lock()
			for topic, ps := range offsets {
				for p := range ps {
					if st := r.parts[topicPartition{topic, p}]; st != nil {
						st.dirty = true
					}
				}
			}
			r.mu.Unlock()
		}
	})
}

// onRevoked finishes the in-flight work of revoked partitions (waiting up to
// the revoke timeout), commits what was settled, and forgets them: later
// acks of their records are ignored and the new owner receives them again.
func (r *Receiver) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	wait := r.cfg.revokeTimeout
	if r.closed || r.killed {
		wait = 0
	}
	r.mu.Unlock()
	r.finish(ctx, revoked, wait, true)
}

func (r *Receiver) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.finish(ctx, lost, 0, false)
}

func (r *Receiver) finish(ctx context.Context, parts map[string][]int32, wait time.Duration, commit bool) {
	deadline := time.Now().Add(wait)
	stop := make(chan struct{})
	defer close(stop)
	if wait > 0 {
		go func() {
			select {
			case <-time.After(wait):
			case <-stop:
			}
			r.mu.Lock()
			r.cond.Broadcast()
			r.mu.Unlock()
		}()
	}
	r.mu.Lock()
	for r.busyLocked(parts) && time.Now().Before(deadline) {
		r.cond.Wait()
	}
	var offsets map[string]map[int32]kgo.EpochOffset
	if commit && !r.killed {
		offsets = r.dirtyLocked(parts)
	}
	for topic, ps := range parts {
		for _, p := range ps {
			delete(r.parts, topicPartition{topic, p})
		}
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	r.commit(ctx, offsets)
}

func (r *Receiver) busyLocked(parts map[string][]int32) bool {
	for topic, ps := range parts {
		for _, p := range ps {
			if st := r.parts[topicPartition{topic, p}]; st != nil && len(st.inflight) > 0 {
				return true
			}
		}
	}
	return false
}

// Close commits every settled offset, leaves the group and closes the
// client. Records received but never settled are delivered again to the
// group.
func (r *Receiver) Close(ctx context.Context) error {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	offsets := r.dirtyLocked(nil)
	r.mu.Unlock()
	r.commit(ctx, offsets)
	r.cl.CloseAllowingRebalance()
	return nil
}

// kill closes the client as a crash would: no final commit.
func (r *Receiver) kill() {
	r.mu.Lock()
	r.closed, r.killed = true, true
	r.mu.Unlock()
	r.cl.CloseAllowingRebalance()
}
