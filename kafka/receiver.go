package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Receiver is a consumer-group member delivering records to the runtime with
// process-then-commit offsets. It implements driver.Receiver,
// driver.Superseder and driver.Preparer.
//
// Offsets: a partition's offset is committed only up to the lowest record
// not yet settled, by a background loop every commit interval, once
// everything received is settled and the receiver has caught up with its
// partitions, on revoke and on Close; so a crash redelivers at most what
// was in flight.
//
// Release (a retry or dead-letter copy that could not be published, or
// shutdown) hands the record and every later record of its partition
// already received back to the receiver, which delivers them again in
// order after the delay, from memory, while fetching of that partition is
// paused. Deliveries handed back are superseded: the runtime skips them, so
// a failed copy costs at most one partition's in-flight window of repeats.
//
// Delay: a record carrying bq-delay (a retry copy, a delayed publish) is
// held in memory until its timestamp plus the delay, without holding back
// the records after it; its offset is not committed until it is settled.
//
// Fairness: a Receive that finds nothing left to hand out polls the
// client for everything it has buffered, and that and the following
// Receives hand it out one partition's record after another's, so that
// handlers run every partition with a backlog at once. What is fetched and
// not yet handed out is at most what one poll brought, besides the fetch
// franz-go buffers meanwhile.
//
// Receive must be called from one goroutine (the runtime's receive loop);
// Ack and Release may be called from any.
type Receiver struct {
	cl     *kgo.Client
	group  string
	topics []string // the consumed topics, tiers excluded
	seeds  []string
	cfg    receiverConfig
	logger *slog.Logger
	conn   *connWatch

	pollMu sync.Mutex // held by Receive and Close

	// mu guards what follows, and is taken with lock and let go of with
	// unlock, never directly: see pendingAck.
	mu        sync.Mutex
	cond      *sync.Cond
	parts     map[topicPartition]*partState
	readyHeld []*slot // held records whose delay has passed
	// turns is the partitions with fetched records not yet taken
	// (partState.fetched), in the order they take their next turn.
	turns []*partState
	// stalled is the partitions whose fetching is paused (partState.paused)
	// or that have a backlog (partState.listed): readyLocked visits them
	// alone, in this order, so that a Receive costs the same however many
	// partitions are assigned.
	stalled []*partState
	// behind counts the partitions not caught up (partState.behind), so
	// that an Ack tells in constant time whether the receiver has caught
	// up.
	behind     int
	pollCancel context.CancelFunc
	closed     bool
	killed     bool
	warned     time.Time // last fetch warning, for rate limiting
	// startsKnown: Superseded has been asked, so a slot's started flag
	// tells which deliveries the runtime has started (see finish).
	startsKnown atomic.Bool

	stopCommits chan struct{}
	stopOnce    sync.Once
	commitsDone chan struct{}
	// settled wakes the commit loop when an Ack made an offset committable
	// while no quiet-period commit was due (quietArmed, under mu); lastAck
	// is when the last such Ack ran.
	settled    chan struct{}
	quietArmed bool
	lastAck    time.Time
	// caughtUp wakes the commit loop when an Ack left nothing received
	// unsettled on any partition, each settled up to its high watermark.
	caughtUp chan struct{}

	// acks is the Acks that found mu taken (pendingAck), under ackMu;
	// nacks is how many, read without it. spare is the slice drainLocked
	// gives acks next, under mu. waiters counts the goroutines about to
	// wait on cond, which an Ack must not leave its settle to (see Ack).
	ackMu   sync.Mutex
	acks    []pendingAck
	nacks   atomic.Int32
	spare   []pendingAck
	waiters atomic.Int32

	// testHookWait, when set, runs just before a revoke waits on cond
	// with r.mu held.
	testHookWait func()
}

// pendingAck is an Ack that found the Receiver's lock taken: rather than
// wait for it (held by Receive while it hands out a batch, or by another
// handler's Ack), the handler leaves the settle to whoever holds it, and
// goes on to its next delivery. Every holder applies the pending Acks
// when it takes the lock (lock) and again before it lets go of it
// (unlock), and looks once more after: an Ack is applied before anything
// that takes the lock after it returned, and none is left behind.
type pendingAck struct {
	t  *token
	at time.Time // when the Ack was asked, for the commit loop's quiet period
}

// lock takes r.mu and applies the pending Acks.
func (r *Receiver) lock() {
	r.mu.Lock()
	r.drainLocked()
}

// unlock applies the pending Acks and lets go of r.mu; and if an Ack was
// left pending meanwhile by a handler that found r.mu taken, takes it
// again to apply that one, unless another goroutine took it first (which
// then does the same).
func (r *Receiver) unlock() {
	for {
		r.drainLocked()
		r.mu.Unlock()
		if r.nacks.Load() == 0 || !r.mu.TryLock() {
			return
		}
	}
}

// drainLocked applies the pending Acks. r.mu must be held.
func (r *Receiver) drainLocked() {
	if r.nacks.Load() == 0 {
		return
	}
	r.ackMu.Lock()
	batch := r.acks
	r.acks = r.spare[:0]
	r.nacks.Store(0)
	r.ackMu.Unlock()
	for i := range batch {
		r.ackLocked(batch[i].t, batch[i].at)
		batch[i] = pendingAck{}
	}
	r.spare = batch[:0]
}

type topicPartition struct {
	topic     string
	partition int32
}

type partState struct {
	tp          topicPartition
	key         string // ordering key handed to the runtime
	inflight    []mark // received and not yet committable, by offset
	commitAt    int64  // next offset to commit
	leaderEpoch int32
	dirty       bool
	backlog     []*slot        // handed back; delivered again, in offset order, first
	backKeys    map[string]int // ordering keys with slots in the backlog
	backlogAt   time.Time      // not before
	held        int            // slots waiting for their bq-delay
	paused      bool
	listed      bool  // in Receiver.stalled: paused, or with a backlog
	hwm         int64 // high watermark as of the last fetch (-1: none yet)
	behind      bool  // counted in Receiver.behind: not caughtUp
	dropped     bool  // being revoked or lost: nothing more is handed out, and finish forgets it
	// fetched is what the last poll brought of the partition and no
	// Receive has taken yet, in offset order. It is not in inflight: its
	// offsets are above every record taken, so no commit passes them, and
	// a revoke drops them for the next owner to fetch.
	fetched []*kgo.Record
}

// mark is a received record's place in its partition's inflight list:
// its offset, held back from the commit until it and every earlier record
// are settled. A settled record waiting for an earlier one keeps its mark
// alone (s is nil), not its slot: the record, its value and its delivery
// are garbage once the runtime lets go of them, however long a slow key
// holds the commit back.
type mark struct {
	off   int64
	epoch int32
	s     *slot // nil once settled
}

// slot is one received record of a partition, in the partition's inflight
// list until it is settled.
type slot struct {
	rec  *kgo.Record
	part *partState
	// state is the slot's generation, bumped each time it is handed to
	// the runtime (the upper 32 bits), and its flags: slotGone, slotBack
	// and slotStarted. It changes under r.mu, by atomic operations, but
	// for Superseded setting slotStarted, which takes no lock: the
	// runtime asks it once a delivery, from every handler at once.
	state atomic.Uint64
	done  bool // settled
	held  bool // waiting for its bq-delay; not handed to the runtime yet
	// first is the box of the slot's first delivery, allocated with it; a
	// delivery handed out again gets a box of its own, so that the token
	// of an earlier one never changes under its holder.
	first deliveryBox
}

// The flags of slot.state.
const (
	// slotGone: its partition was revoked or lost.
	slotGone = 1 << iota
	// slotBack: handed back (Release); waiting in the backlog.
	slotBack
	// slotStarted: the runtime began handling the delivery of this
	// generation (it asked Superseded, which answered no). A revoke waits
	// only for started slots; the others are superseded at once.
	slotStarted
)

func (s *slot) gone() bool        { return s.state.Load()&slotGone != 0 }
func (s *slot) back() bool        { return s.state.Load()&slotBack != 0 }
func (s *slot) set(flag uint64)   { s.state.Or(flag) }
func (s *slot) unset(flag uint64) { s.state.And(^flag) }

// token is a delivery's handle: the slot as it was handed out. A slot
// handed out again makes the earlier tokens superseded.
type token struct {
	s   *slot
	gen uint32
}

func (t *token) superseded() bool { return supersedes(t.s.state.Load(), t.gen) }

// supersedes reports whether a slot in state supersedes its delivery of
// generation gen.
func supersedes(state uint64, gen uint32) bool {
	return state&(slotGone|slotBack) != 0 || uint32(state>>32) != gen
}

// As serves driver.Delivery.As: target, a **kgo.Record, is set to the
// delivery's record.
func (t *token) As(target any) bool {
	p, ok := target.(**kgo.Record)
	if ok {
		*p = t.s.rec
	}
	return ok
}

// Ordering says which records of a partition a Receiver hands to the
// runtime one at a time.
type Ordering int

const (
	// OrderByKey (the default) runs records of different keys of one
	// partition concurrently, each key strictly in offset order; records
	// without a key keep partition order among themselves. Offsets are
	// committed only below the lowest record not yet settled, so nothing is
	// committed early (the model of Confluent's Parallel Consumer).
	OrderByKey Ordering = iota
	// OrderByPartition runs the records of one partition one at a time.
	OrderByPartition
)

// String returns the constant's name, or Ordering(n) for any other value.
func (o Ordering) String() string {
	switch o {
	case OrderByKey:
		return "OrderByKey"
	case OrderByPartition:
		return "OrderByPartition"
	}
	return "Ordering(" + strconv.Itoa(int(o)) + ")"
}

// ReceiverOption configures a Receiver.
type ReceiverOption func(*receiverConfig)

type receiverConfig struct {
	kopts          []kgo.Opt
	pollWait       time.Duration
	commitInterval time.Duration
	revokeTimeout  time.Duration
	tiers          int
	maxHeld        int
	maxUncommitted int
	createTopics   bool
	ordering       Ordering
	partitions     int32
	replication    int16
	logger         *slog.Logger
}

// WithConsumerClientOptions passes options to the franz-go client (SASL,
// TLS, FetchMaxWait, session timeout…); they apply after the Receiver's own.
func WithConsumerClientOptions(opts ...kgo.Opt) ReceiverOption {
	return func(c *receiverConfig) { c.kopts = append(c.kopts, opts...) }
}

// WithPollWait bounds how long one Receive waits for records (default
// 500ms; d <= 0 keeps it: a Receive that never waits would spin).
func WithPollWait(d time.Duration) ReceiverOption {
	return func(c *receiverConfig) {
		if d > 0 {
			c.pollWait = d
		}
	}
}

// WithCommitInterval sets how often settled offsets are committed while
// records keep being settled (default 250ms). Once they stop, what was
// settled is committed as soon as everything received is settled up to
// every partition's high watermark (but not within a tenth of the interval
// of the last commit), and otherwise a tenth of the interval after the last
// settle; offsets are also committed on revoke and on Close.
func WithCommitInterval(d time.Duration) ReceiverOption {
	return func(c *receiverConfig) {
		if d > 0 {
			c.commitInterval = d
		}
	}
}

// WithRevokeTimeout bounds how long a rebalance waits for in-flight records
// of revoked partitions to be settled before abandoning them to the new
// owner, which will receive them again (default 10s; keep it below the
// group's rebalance timeout).
func WithRevokeTimeout(d time.Duration) ReceiverOption {
	return func(c *receiverConfig) { c.revokeTimeout = d }
}

// WithRetryTierTopics also consumes the n delay-tier topics of every topic
// ("<topic>.retry.1" … "<topic>.retry.<n>", see WithRetryTiers).
func WithRetryTierTopics(n int) ReceiverOption { return func(c *receiverConfig) { c.tiers = n } }

// WithOrdering chooses what runs concurrently within a partition (default
// OrderByKey).
func WithOrdering(o Ordering) ReceiverOption { return func(c *receiverConfig) { c.ordering = o } }

// WithMaxHeld bounds the records that wait in memory (default 1000): the
// records of one partition held for a retry delay, past which fetching of
// the partition pauses until some are due; and, in the consumer, the
// records of all partitions waiting behind an earlier record of their key
// (driver.Capabilities.Backlog, and at most queue.WithBacklogBytes of
// their values), past which a waiting record counts against the
// consumer's pending deliveries (queue.WithBatchSize), as any other, and
// then is handed back for a short while (driver.Capabilities.Defer).
func WithMaxHeld(n int) ReceiverOption {
	return func(c *receiverConfig) {
		if n > 0 {
			c.maxHeld = n
		}
	}
}

// DefaultMaxUncommitted is how many records of one partition a Receiver
// holds received and not yet committable unless WithMaxUncommitted says
// otherwise.
const DefaultMaxUncommitted = 10000

// WithMaxUncommitted bounds how many records of one partition may be
// received and not yet committable at once (default DefaultMaxUncommitted):
// a record is committable once it and every earlier record of its
// partition are settled. Past it, fetching of the partition pauses until
// the commit catches up. Under OrderByKey a slow or stuck key holds the
// commit back while the other keys go on; this bounds how far, and so how
// much a crash or a rebalance delivers again. It bounds memory too: a
// waiting record's value shares its fetch's buffer, so the records a stuck
// key holds back keep up to about n records' worth of fetched batches alive.
func WithMaxUncommitted(n int) ReceiverOption {
	return func(c *receiverConfig) {
		if n > 0 {
			c.maxUncommitted = n
		}
	}
}

// WithCreateTopics makes the startup check create missing topics (consumed,
// dead-letter and tier topics) with the given partitions and replication
// factor (-1 for the broker's defaults), instead of failing.
func WithCreateTopics(partitions int32, replicationFactor int16) ReceiverOption {
	return func(c *receiverConfig) {
		c.createTopics, c.partitions, c.replication = true, partitions, replicationFactor
	}
}

// WithReceiverLogger logs to l (default slog.Default()).
func WithReceiverLogger(l *slog.Logger) ReceiverOption {
	return func(c *receiverConfig) { c.logger = l }
}

// NewReceiver joins consumer group group on topics. A new group starts at
// the earliest offset, so messages published before the first member joined
// are not lost.
func NewReceiver(seeds []string, group string, topics []string, opts ...ReceiverOption) (*Receiver, error) {
	cfg := receiverConfig{pollWait: 500 * time.Millisecond, commitInterval: 250 * time.Millisecond,
		revokeTimeout: 10 * time.Second, maxHeld: 1000, maxUncommitted: DefaultMaxUncommitted}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	switch {
	case cfg.ordering != OrderByKey && cfg.ordering != OrderByPartition:
		return nil, fmt.Errorf("babelqueue/kafka: WithOrdering(%v): not OrderByKey or OrderByPartition", cfg.ordering)
	case cfg.tiers < 0:
		return nil, fmt.Errorf("babelqueue/kafka: WithRetryTierTopics(%d): a negative number of tiers", cfg.tiers)
	}
	all := append([]string(nil), topics...)
	for _, t := range topics {
		all = append(all, RetryTopics(t, cfg.tiers)...)
	}
	r := &Receiver{
		group: group, topics: slices.Clone(topics), seeds: slices.Clone(seeds), cfg: cfg, logger: cfg.logger,
		conn:  newConnWatch(cfg.logger, "consumer group "+group),
		parts: map[topicPartition]*partState{}, stopCommits: make(chan struct{}), commitsDone: make(chan struct{}),
		settled: make(chan struct{}, 1), caughtUp: make(chan struct{}, 1),
	}
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
		kgo.WithHooks(r.conn),
	}
	cl, err := kgo.NewClient(append(kopts, cfg.kopts...)...)
	if err != nil {
		return nil, fmt.Errorf("babelqueue/kafka: consumer client: %w", err)
	}
	r.cl = cl
	go r.commitLoop()
	return r, nil
}

// Client returns the underlying franz-go client.
func (r *Receiver) Client() *kgo.Client { return r.cl }

// As sets target, a **kgo.Client, to the consumer's client; it reports
// false for any other type. A delivery's As gives its *kgo.Record.
func (r *Receiver) As(target any) bool {
	p, ok := target.(**kgo.Client)
	if ok {
		*p = r.cl
	}
	return ok
}

// Capabilities implements driver.Receiver: Kafka has no native redelivery
// count, so retries republish (with bq-delay, which this Receiver honours);
// Release hands records back for redelivery after the delay. A consumer
// not given a batch size asks each Receive for up to ReceiveBatch records:
// fetched records hold nothing on the broker while they wait. For the same
// reason up to WithMaxHeld records may wait in the consumer behind an
// earlier record of their key (driver.Capabilities.Backlog) while the other
// keys go on; WithMaxUncommitted bounds how far a partition runs ahead.
// Past that the consumer may hand a waiting record back
// (driver.Capabilities.Defer): Release keeps it, and the later records of
// its key, for a short delay, while the other keys go on (see Release), so
// a stuck key holds back only itself and its partition's commit.
func (r *Receiver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Delay: true, Batch: ReceiveBatch, Backlog: r.cfg.maxHeld, Defer: true}
}

// ReceiveBatch is the batch size (driver.Capabilities.Batch) a Receiver
// suggests to the consumer: a hundred records a Receive, against ten, cuts
// the per-message cost of consuming by about a fifth.
const ReceiveBatch = 100

// Receive implements driver.Receiver.
func (r *Receiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	if max <= 0 {
		max = 1
	}
	r.lock()
	if r.closed {
		r.unlock()
		return nil, driver.ErrClosed
	}
	out, resume, pause := r.handOutLocked(time.Now(), max)
	pctx, cancel := context.WithTimeout(ctx, r.cfg.pollWait)
	r.pollCancel = cancel
	r.unlock()
	r.pauseParts(pause)
	r.resume(resume)
	if len(out) > 0 {
		cancel()
		r.fillAll(out)
		return out, nil
	}

	// Everything the client has buffered, so that the records are taken
	// from every partition fetched in turn (takeLocked), not the first
	// partition's up to max: with a backlog, a fetch holds up to
	// FetchMaxPartitionBytes of each partition, and handlers given one
	// partition's records at a time run one partition at a time.
	fetches := r.cl.PollFetches(pctx)
	cancel()
	if fetches.IsClientClosed() {
		return nil, driver.ErrClosed
	}
	var ferr error
	fetches.EachError(func(topic string, p int32, err error) {
		if ferr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			ferr = fmt.Errorf("babelqueue/kafka: fetching %s[%d] from %s: %w", topic, p, strings.Join(r.seeds, ","), err)
		}
	})

	now := time.Now()
	r.lock()
	r.pollCancel = nil
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		hwm := int64(-1)
		if p.Err == nil {
			hwm = p.HighWatermark
		}
		r.fetchedLocked(r.state(topicPartition{p.Topic, p.Partition}), p.Records, hwm)
	})
	out, resume, pause = r.handOutLocked(now, max)
	r.unlock()
	// What is taken is registered, and what is not is only fetched: a
	// rebalance may run now. Its revoke waits for what was taken to be
	// settled and drops the rest.
	r.cl.AllowRebalance()
	r.pauseParts(pause)
	r.resume(resume)
	if len(out) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if ferr == nil {
			// franz-go retries connections quietly: an empty poll while
			// the last dial failed is a broker we cannot reach.
			if cause := r.conn.lastErr(); cause != nil {
				ferr = fmt.Errorf("babelqueue/kafka: consumer group %s: %w", r.group, cause)
			}
		}
		return nil, ferr
	}
	if ferr != nil {
		r.warnFetch(ferr)
	}
	r.fillAll(out)
	return out, nil
}

// handOutLocked returns up to max deliveries: first the records that
// became ready again (readyLocked), then fetched ones (takeLocked); and
// the partitions whose fetching may resume and must pause. The deliveries
// are issued (issueLocked): fillAll completes them once r.mu is released.
// r.mu must be held.
func (r *Receiver) handOutLocked(now time.Time, max int) (out []*driver.Delivery, resume, pause []topicPartition) {
	out, resume = r.readyLocked(now, max, nil)
	out, pause = r.takeLocked(now, max-len(out), out)
	return out, resume, pause
}

// takeLocked appends to out, up to max, the deliveries of fetched records
// not yet taken, one partition's next record after another's in turn (a
// record of a lane with records handed back, or with a delay not yet
// passed, is taken without being handed out). A partition with
// WithMaxUncommitted records taken and not committable waits for its
// commit to catch up. A partition whose turn a full out ended keeps its
// place: the next call starts with it. It returns the partitions whose
// fetching must pause. r.mu must be held.
func (r *Receiver) takeLocked(now time.Time, max int, out []*driver.Delivery) ([]*driver.Delivery, []topicPartition) {
	var pause []topicPartition
	var waiting []*partState // at WithMaxUncommitted: they keep their turn
	for max > 0 && len(r.turns) > 0 {
		st := r.turns[0]
		r.turns[0] = nil
		r.turns = r.turns[1:]
		if len(st.fetched) == 0 { // all taken, or revoked since (finish empties it)
			continue
		}
		if len(st.inflight) >= r.cfg.maxUncommitted {
			waiting = append(waiting, st)
			continue
		}
		rec := st.fetched[0]
		st.fetched[0] = nil
		st.fetched = st.fetched[1:]
		if len(st.fetched) > 0 {
			r.turns = append(r.turns, st)
		} else {
			st.fetched = nil
		}
		s := &slot{rec: rec, part: st}
		st.insert(s) // from fetched to inflight: still not caught up
		due, delayed := heldUntil(rec)
		switch {
		case len(st.backlog) > 0 && (r.cfg.ordering == OrderByPartition || st.backKeys[string(rec.Key)] > 0):
			k := r.laneKey(s)
			s.set(slotBack) // behind what its lane handed back
			st.backlog = append(st.backlog, s)
			st.backKeys[k]++
		case delayed && due.After(now):
			r.holdLocked(s, due.Sub(now))
		default:
			out = append(out, r.issueLocked(s))
			max--
		}
		// Too many held for their delay, or not yet committable: fetching
		// of the partition pauses until readyLocked finds it resumable.
		if !st.paused && !r.resumable(st) {
			r.stallLocked(st)
			pause = append(pause, st.tp)
		}
	}
	if len(waiting) > 0 {
		r.turns = append(waiting, r.turns...)
	} else if len(r.turns) == 0 {
		r.turns = nil // lets go of the array the turns walked through
	}
	return out, pause
}

// warnFetch logs a fetch error at most every 10s.
func (r *Receiver) warnFetch(err error) {
	r.lock()
	due := time.Since(r.warned) > 10*time.Second
	if due {
		r.warned = time.Now()
	}
	r.unlock()
	if due {
		r.logger.Warn("babelqueue/kafka: fetch error", slog.Any("error", err))
	}
}

// readyLocked appends to out, up to max in all, the held records whose
// delay has passed and the backlog records that may be delivered again. It
// returns the partitions whose fetching may resume. r.mu must be held.
func (r *Receiver) readyLocked(now time.Time, max int, out []*driver.Delivery) ([]*driver.Delivery, []topicPartition) {
	n := 0
	for n < len(r.readyHeld) && max > 0 {
		s := r.readyHeld[n]
		n++
		if s.gone() || !s.held || s.part.dropped {
			continue
		}
		s.held = false
		s.part.held--
		out = append(out, r.issueLocked(s))
		max--
	}
	r.readyHeld = r.readyHeld[n:]
	var resume []topicPartition
	// Only a listed partition can have a backlog or be resumable.
	for _, st := range r.stalled {
		if st.dropped {
			continue
		}
		for max > 0 && len(st.backlog) > 0 && !now.Before(st.backlogAt) {
			s := st.backlog[0]
			st.backlog[0] = nil
			st.backlog = st.backlog[1:]
			// A key with nothing left in the backlog leaves the map: every
			// key a retry ever handed back would stay in it otherwise.
			if k := r.laneKey(s); st.backKeys[k] > 1 {
				st.backKeys[k]--
			} else {
				delete(st.backKeys, k)
			}
			if s.gone() || s.done {
				s.unset(slotBack)
				continue
			}
			// The slot leaves the backlog with a new generation, in one
			// atomic step (nextGen clears slotBack): Superseded takes
			// no lock, and a delivery handed out before must never look
			// live between the two.
			if due, ok := heldUntil(s.rec); ok && due.After(now) {
				s.nextGen()
				r.holdLocked(s, due.Sub(now)) // a delayed record keeps its delay
				continue
			}
			out = append(out, r.issueLocked(s))
			max--
		}
		if st.paused && r.resumable(st) {
			st.paused = false
			resume = append(resume, st.tp)
		}
	}
	if n := len(r.stalled); n > 0 {
		// The partition that came first goes last, so that no partition's
		// backlog keeps coming first when max runs out.
		first := r.stalled[0]
		copy(r.stalled, r.stalled[1:])
		r.stalled[n-1] = first
		r.stalled = slices.DeleteFunc(r.stalled, func(st *partState) bool {
			gone := st.dropped || !st.paused && len(st.backlog) == 0
			st.listed = !gone
			return gone
		})
		if len(r.stalled) == 0 {
			r.stalled = nil
		}
	}
	return out, resume
}

// stallLocked pauses st's fetching in the Receiver's books (the caller
// pauses the client's): readyLocked visits it until it is resumable. r.mu
// must be held.
func (r *Receiver) stallLocked(st *partState) {
	st.paused = true
	r.listLocked(st)
}

// listLocked has readyLocked visit st: it is paused, or has a backlog.
// r.mu must be held.
func (r *Receiver) listLocked(st *partState) {
	if !st.listed {
		st.listed = true
		r.stalled = append(r.stalled, st)
	}
}

// fetchedLocked adds records a poll brought of st, and the partition's
// high watermark then (-1: unknown), to what Receive hands out. r.mu must
// be held.
func (r *Receiver) fetchedLocked(st *partState, recs []*kgo.Record, hwm int64) {
	if hwm >= 0 {
		st.hwm = hwm
	}
	if len(st.fetched) == 0 {
		r.turns = append(r.turns, st)
	}
	st.fetched = append(st.fetched, recs...)
	r.trackLocked(st)
}

// caughtUp reports whether st has nothing received left unsettled, nothing
// fetched left to take, and is settled up to its high watermark as of its
// last fetch.
func (st *partState) caughtUp() bool {
	return len(st.inflight) == 0 && len(st.fetched) == 0 && st.commitAt >= st.hwm
}

// trackLocked counts st in r.behind while it is not caught up; it is
// called after every change to what caughtUp reads that can change its
// answer: records fetched, an offset settled. (Taking a fetched record
// moves it to inflight, which leaves the answer as it was; a revoke
// uncounts the partition it forgets.) r.mu must be held.
func (r *Receiver) trackLocked(st *partState) {
	if behind := !st.caughtUp(); behind != st.behind {
		st.behind = behind
		if behind {
			r.behind++
		} else {
			r.behind--
		}
	}
}

// resumable reports whether nothing keeps st's fetching paused: fewer
// than maxHeld records are held for a delay, fewer than maxUncommitted are
// not yet committable, and, under OrderByPartition, no record handed back
// waits (every later record of the partition would only join it). Under
// OrderByKey the other keys' records go on being fetched and handed out
// while a key's records wait in the backlog.
func (r *Receiver) resumable(st *partState) bool {
	return (len(st.backlog) == 0 || r.cfg.ordering == OrderByKey) &&
		st.held < r.cfg.maxHeld && len(st.inflight) < r.cfg.maxUncommitted
}

// holdLocked keeps s until its delay has passed. r.mu must be held.
func (r *Receiver) holdLocked(s *slot, d time.Duration) {
	s.held = true
	s.part.held++
	time.AfterFunc(d, func() {
		r.lock()
		if !s.gone() && s.held {
			r.readyHeld = append(r.readyHeld, s)
			r.wakeLocked()
		}
		r.unlock()
	})
}

// wakeLocked ends a poll in progress so that Receive returns what became
// ready. r.mu must be held.
func (r *Receiver) wakeLocked() {
	if r.pollCancel != nil {
		r.pollCancel()
	}
}

func (r *Receiver) pauseParts(tps []topicPartition) {
	if len(tps) > 0 {
		r.cl.PauseFetchPartitions(partitionMap(tps))
	}
}

func (r *Receiver) resume(tps []topicPartition) {
	if len(tps) > 0 {
		r.cl.ResumeFetchPartitions(partitionMap(tps))
	}
}

func partitionMap(tps []topicPartition) map[string][]int32 {
	m := map[string][]int32{}
	for _, tp := range tps {
		m[tp.topic] = append(m[tp.topic], tp.partition)
	}
	return m
}

// insert adds s in offset order.
func (st *partState) insert(s *slot) {
	i := len(st.inflight)
	for i > 0 && st.inflight[i-1].off > s.rec.Offset {
		i--
	}
	st.inflight = slices.Insert(st.inflight, i, mark{off: s.rec.Offset, epoch: s.rec.LeaderEpoch, s: s})
}

// find returns the index of s's mark in the inflight list, -1 if it has
// none.
func (st *partState) find(s *slot) int {
	i, ok := slices.BinarySearchFunc(st.inflight, s.rec.Offset, func(m mark, off int64) int { return cmp.Compare(m.off, off) })
	if !ok || st.inflight[i].s != s {
		return -1
	}
	return i
}

func (r *Receiver) state(tp topicPartition) *partState {
	st := r.parts[tp]
	if st == nil {
		st = &partState{tp: tp, key: tp.topic + "/" + strconv.Itoa(int(tp.partition)), commitAt: -1, hwm: -1, backKeys: map[string]int{}}
		r.parts[tp] = st
	}
	return st
}

// heldUntil returns when a record carrying bq-delay becomes due: its
// timestamp (the time the copy was produced) plus the delay.
func heldUntil(rec *kgo.Record) (time.Time, bool) {
	v, ok := header(rec, HeaderDelay)
	if !ok {
		return time.Time{}, false
	}
	d, ok := core.ParseDelay(v)
	if !ok {
		return time.Time{}, false
	}
	// The timestamp is in whole milliseconds, cut down from the time the
	// copy was produced: one more keeps the delay a full delay.
	return rec.Timestamp.Add(d + time.Millisecond), true
}

// laneKey is the ordering key of s within its partition: its record key
// under OrderByKey, "" (the whole partition) otherwise and for unkeyed
// records.
func (r *Receiver) laneKey(s *slot) string {
	if r.cfg.ordering == OrderByKey {
		return string(s.rec.Key)
	}
	return ""
}

// deliveryBox is a delivery and its token in one allocation.
type deliveryBox struct {
	d driver.Delivery
	t token
}

// issueLocked hands s to the runtime once more: a new generation, and the
// delivery of it with its token set. Its other fields are set by fill once
// r.mu is released: building them (the header map and the strings) is
// most of what handing out a record costs, and the Acks that find r.mu
// taken meanwhile are left for Receive to apply. r.mu must be held.
func (r *Receiver) issueLocked(s *slot) *driver.Delivery {
	gen := s.nextGen()
	box := &s.first
	if gen > 1 {
		box = new(deliveryBox)
	}
	box.t = token{s: s, gen: gen}
	box.d = driver.Delivery{Token: &box.t}
	return &box.d
}

// nextGen starts s's next generation, neither started nor handed back, and
// returns it: the deliveries handed out before are superseded. The
// Receiver's lock must be held.
func (s *slot) nextGen() uint32 {
	for {
		old := s.state.Load()
		gen := uint32(old>>32) + 1
		if s.state.CompareAndSwap(old, uint64(gen)<<32|old&slotGone) {
			return gen
		}
	}
}

// fill sets the fields of d, issued by issueLocked, from its record. What
// it reads (the record, the partition's key, the configuration) never
// changes once fetched, and nothing else refers to d before it is handed
// out, so r.mu need not be held. The header values are the record's own
// bytes, not copies (see recordString); the position and the ordering key
// share one allocation.
func (r *Receiver) fill(d *driver.Delivery) {
	s := d.Token.(*token).s
	rec := s.rec
	var key []byte
	if r.cfg.ordering == OrderByKey {
		key = rec.Key
	}
	var num [20]byte
	offset := strconv.AppendInt(num[:0], rec.Offset, 10)
	var b strings.Builder
	b.Grow(2*len(s.part.key) + 2 + len(offset) + len(key))
	b.WriteString(s.part.key)
	b.WriteByte('@')
	b.Write(offset)
	if len(key) > 0 {
		b.WriteString(s.part.key)
		b.WriteByte('|')
		b.Write(key)
	}
	all := b.String()
	hs := rec.Headers
	headers := make(map[string]string, len(hs))
	// The three headers read here are picked up on the way, not looked up
	// after; a repeated header counts by its last value, as in the map.
	var att, sv, orig string
	var hasAtt, hasSV, hasOrig bool
	for i := range hs {
		h := &hs[i]
		v := recordString(h.Value)
		headers[h.Key] = v
		switch h.Key {
		case HeaderAttempts:
			att, hasAtt = v, true
		case HeaderSchemaVersion:
			sv, hasSV = v, true
		case HeaderOriginalTopic:
			orig, hasOrig = v, true
		}
	}
	position := all[:len(s.part.key)+1+len(offset)]
	ordering := s.part.key
	if len(key) > 0 {
		ordering = all[len(position):]
	}
	queue := rec.Topic
	if hasOrig && strings.HasPrefix(rec.Topic, orig+".retry.") {
		queue = orig
	}
	d.Body = rec.Value
	d.Queue = queue
	d.Headers = headers
	d.Native = NativeAttempts(att, hasAtt)
	d.Gate = Gate(sv, hasSV)
	d.OrderingKey = ordering
	d.Position = position
}

// recordString is b, a part of a fetched record, as a string that shares
// its memory rather than a copy of it. A fetched record belongs to the
// Receiver: franz-go hands each fetch's records their own memory (no
// kgo.WithPools here) and writes to it no more, the Receiver never
// modifies a record, and a handler that reaches it through
// driver.Delivery.As must not either (see driver.Delivery.Body, decoded in
// place the same way). Copying a delivery's header values cost about a
// tenth of handing out a record, most of it spent reading them from memory
// the fetch wrote on another CPU.
func recordString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// fillAll fills every delivery of out (fill).
func (r *Receiver) fillAll(out []*driver.Delivery) {
	for _, d := range out {
		r.fill(d)
	}
}

func tokenOf(d *driver.Delivery) (*token, error) {
	t, ok := d.Token.(*token)
	if !ok {
		return nil, fmt.Errorf("babelqueue/kafka: foreign delivery token %T", d.Token)
	}
	return t, nil
}

// Lag implements driver.Lagger: per topic, the sum over the partitions
// this member holds of the high watermark of the last fetch less the next
// offset to commit (the consumer group's lag as of that fetch).
func (r *Receiver) Lag() map[string]int64 {
	r.lock()
	defer r.unlock()
	var out map[string]int64
	for tp, st := range r.parts {
		if st.hwm < 0 {
			continue
		}
		first := st.commitAt
		if first < 0 && len(st.inflight) > 0 {
			first = st.inflight[0].off
		}
		if first < 0 && len(st.fetched) > 0 {
			first = st.fetched[0].Offset
		}
		if first < 0 {
			continue
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[tp.topic] += max(st.hwm-first, 0)
	}
	return out
}

// Superseded implements driver.Superseder: a delivery handed back by a
// Release of an earlier record of its partition, or of a revoked partition,
// is delivered again (by this Receiver or the partition's new owner) and
// must not be handled now. The runtime asks just before it starts a
// delivery, so a delivery it is told to handle counts as started from
// then on: a revoke waits for it (see WithRevokeTimeout).
func (r *Receiver) Superseded(d *driver.Delivery) bool {
	t, err := tokenOf(d)
	if err != nil {
		return false
	}
	if !r.startsKnown.Load() {
		r.startsKnown.Store(true)
	}
	// No lock: a revoke marks the slots not started gone (finish) and a
	// Release or a new generation supersedes the delivery, each by an
	// atomic change of the state this compares and swaps, so either the
	// delivery is started first, and they see it, or it is superseded
	// first, and this sees it.
	for {
		st := t.s.state.Load()
		if supersedes(st, t.gen) {
			return true
		}
		if st&slotStarted != 0 || t.s.state.CompareAndSwap(st, st|slotStarted) {
			return false
		}
	}
}

// Ack implements driver.Receiver: the record's offset becomes committable
// once every earlier record of its partition is settled too. Acks of
// superseded deliveries are ignored: those records are delivered again.
//
// Ack does not wait for the Receiver's lock: when another goroutine holds
// it, the settle is left to that goroutine, which applies it before it
// lets go of the lock (see pendingAck). Either way it is applied before
// any Receive, Release, commit or revoke that starts after Ack returned.
func (r *Receiver) Ack(_ context.Context, d *driver.Delivery) error {
	t, err := tokenOf(d)
	if err != nil {
		return err
	}
	now := time.Now()
	if r.mu.TryLock() {
		r.drainLocked()
		r.ackLocked(t, now)
		r.unlock()
		return nil
	}
	r.ackMu.Lock()
	r.acks = append(r.acks, pendingAck{t: t, at: now})
	r.nacks.Add(1)
	r.ackMu.Unlock()
	if r.waiters.Load() > 0 {
		// A revoke waits on r.cond for this very settle, perhaps, and
		// cond.Wait lets go of the lock without applying what is
		// pending: apply it here, once the lock is free.
		r.lock()
		r.unlock()
		return nil
	}
	// The holder may have let go of the lock before it saw this one.
	if r.mu.TryLock() {
		r.unlock()
	}
	return nil
}

// ackLocked applies the Ack of t, asked at now. r.mu must be held.
func (r *Receiver) ackLocked(t *token, now time.Time) {
	s := t.s
	if t.superseded() || s.done {
		return
	}
	s.done = true
	st := s.part
	if i := st.find(s); i >= 0 {
		st.inflight[i].s = nil
	}
	advanced, was := false, len(st.inflight)
	for len(st.inflight) > 0 && st.inflight[0].s == nil {
		st.commitAt = st.inflight[0].off + 1
		st.leaderEpoch = st.inflight[0].epoch
		st.inflight = st.inflight[1:]
		st.dirty, advanced = true, true
	}
	if advanced {
		r.trackLocked(st)
		if was >= r.cfg.maxUncommitted && st.paused && r.resumable(st) {
			r.wakeLocked() // the commit caught up: the poll in progress ends, the next resumes the partition
		}
		if now.After(r.lastAck) { // Acks are applied in no particular order
			r.lastAck = now
		}
		if !r.quietArmed {
			r.quietArmed = true
			select {
			case r.settled <- struct{}{}:
			default:
			}
		}
		if !st.behind && r.caughtUpLocked() {
			select {
			case r.caughtUp <- struct{}{}:
			default:
			}
		}
	}
	r.cond.Broadcast()
}

// caughtUpLocked reports whether every partition has nothing received left
// unsettled and is settled up to its high watermark as of its last fetch,
// and the client holds no fetched record not yet received: the burst
// fetched is over, and there is nothing more to wait for.
func (r *Receiver) caughtUpLocked() bool {
	return r.behind == 0 && r.cl.BufferedFetchRecords() == 0
}

// Release implements driver.Receiver: the record, and every later record of
// its lane (its key under OrderByKey, its partition under OrderByPartition)
// that was received and is neither settled nor held for a delay, are
// delivered again in order after delay; the deliveries already handed out
// for them are superseded. Until then nothing from the record on is
// committed, and the later records of its lane that are fetched wait
// behind it. Under OrderByPartition fetching of the partition pauses until
// then; under OrderByKey the other keys' records go on, up to
// WithMaxUncommitted records of the partition not yet committable.
func (r *Receiver) Release(_ context.Context, d *driver.Delivery, delay time.Duration) error {
	t, err := tokenOf(d)
	if err != nil {
		return err
	}
	r.lock()
	s := t.s
	if t.superseded() || s.done {
		r.unlock()
		return nil
	}
	st := s.part
	lane := r.laneKey(s)
	for _, m := range st.inflight[max(st.find(s), 0):] {
		x := m.s
		if x == nil || x.held || x.done || x.back() || r.laneKey(x) != lane {
			continue
		}
		x.set(slotBack)
		st.backlog = append(st.backlog, x)
		st.backKeys[lane]++
	}
	slices.SortFunc(st.backlog, func(a, b *slot) int { return cmp.Compare(a.rec.Offset, b.rec.Offset) })
	if at := time.Now().Add(delay); at.After(st.backlogAt) {
		st.backlogAt = at
	}
	r.listLocked(st)
	pause := !st.paused && !r.resumable(st)
	if pause {
		r.stallLocked(st)
	}
	r.cond.Broadcast()
	r.unlock()
	if pause {
		r.pauseParts([]topicPartition{st.tp})
	}
	time.AfterFunc(delay, func() {
		r.lock()
		r.wakeLocked()
		r.unlock()
	})
	return nil
}

func (r *Receiver) stopCommitLoop() {
	r.stopOnce.Do(func() { close(r.stopCommits) })
	<-r.commitsDone
}

// commitLoop commits settled offsets every commit interval while records
// keep being settled, whether or not the runtime is receiving. Once they
// stop, it commits as soon as the receiver has caught up (everything
// received settled, up to every partition's high watermark, nothing left
// buffered), but not within a quiet period (a tenth of the interval) of its
// last commit, and otherwise a quiet period after the last settle: a burst
// is committed as soon as it is handled rather than at the next tick, and
// no pattern of bursts costs more than one commit per quiet period. A
// receiver that catches up again within a quiet period of catching up
// (a trickle: each record handled before the next arrives) is not at the
// end of a burst: it is left to the tick and to the quiet period after the
// last settle, so a steady stream, however thin, costs one commit per
// interval.
func (r *Receiver) commitLoop() {
	defer close(r.commitsDone)
	t := time.NewTicker(r.cfg.commitInterval)
	defer t.Stop()
	quiet := max(r.cfg.commitInterval/10, time.Millisecond)
	q := time.NewTimer(quiet)
	q.Stop()
	defer q.Stop()
	var last time.Time   // when the loop last sent offsets
	var lastUp time.Time // when the receiver last caught up
	caught := false      // caught up within a quiet period of last: q commits at last+quiet
	for {
		var offsets map[string]map[int32]kgo.EpochOffset
		select {
		case <-r.stopCommits:
			return
		case <-r.settled:
			if !caught {
				q.Reset(quiet)
			}
			continue
		case <-r.caughtUp:
			now := time.Now()
			again := now.Sub(lastUp) < quiet
			lastUp = now
			if again {
				continue
			}
			if wait := quiet - now.Sub(last); wait > 0 {
				caught = true
				q.Reset(wait)
				continue
			}
			r.lock()
			offsets = r.dirtyLocked(nil)
			r.unlock()
		case <-q.C:
			r.lock()
			if wait := quiet - time.Since(r.lastAck); wait > 0 && !caught {
				r.unlock()
				q.Reset(wait) // settled again since: not quiet yet
				continue
			}
			r.quietArmed = false
			offsets = r.dirtyLocked(nil)
			r.unlock()
		case <-t.C:
			r.lock()
			offsets = r.dirtyLocked(nil)
			r.unlock()
		}
		caught = false
		if len(offsets) == 0 {
			continue
		}
		last = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.commit(ctx, offsets)
		cancel()
	}
}

// dirtyLocked collects committable offsets (of only the given partitions
// when only is non-nil) and clears their dirty flags.
func (r *Receiver) dirtyLocked(only map[string][]int32) map[string]map[int32]kgo.EpochOffset {
	var out map[string]map[int32]kgo.EpochOffset
	for tp, st := range r.parts {
		if !st.dirty || (only != nil && !slices.Contains(only[tp.topic], tp.partition)) {
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

func (r *Receiver) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) {
	if len(offsets) == 0 {
		return
	}
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
						err = fmt.Errorf("partition %s[%d]: %w", t.Topic, p.Partition, perr)
					}
				}
			}
		}
		if err != nil {
			r.logger.Warn("babelqueue/kafka: commit failed; offsets will be committed again", slog.Any("error", err))
			r.lock()
			for topic, ps := range offsets {
				for p := range ps {
					if st := r.parts[topicPartition{topic, p}]; st != nil {
						st.dirty = true
					}
				}
			}
			r.unlock()
		}
	})
}

// onRevoked finishes the in-flight work of revoked partitions (waiting up to
// the revoke timeout), commits what was settled, and forgets them: later
// acks of their records are ignored and the new owner receives them again.
func (r *Receiver) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.lock()
	wait := r.cfg.revokeTimeout
	if r.closed || r.killed {
		wait = 0
	}
	r.unlock()
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
			r.lock()
			r.cond.Broadcast()
			r.unlock()
		}()
	}
	r.lock()
	// Nothing more of the partitions is handed out from here on: what was
	// fetched and not taken is left to the next owner, which fetches it
	// from the committed offset, and a backlog or a record whose delay
	// passes is not handed out (Receive runs while the revoke waits
	// below; a record it handed out now would be handled here and again
	// by the next owner, and hold the revoke up while it runs).
	r.forEachStateLocked(parts, func(st *partState) {
		st.dropped = true
		st.fetched = nil
	})
	// What the runtime has received but not started is given up at once:
	// the partition's next owner receives it from the committed offset,
	// and the runtime skips it (Superseded). Only handlers already running
	// are waited for, so a revoke takes as long as they do, however many
	// records were received ahead.
	// (A caller that never asks Superseded, using the Receiver on its own,
	// starts nothing that the Receiver knows of: all it holds is waited
	// for.)
	if r.startsKnown.Load() {
		r.forEachSlotLocked(parts, func(s *slot) {
			if s.done {
				return
			}
			for { // a Superseded may start it meanwhile
				st := s.state.Load()
				if st&slotStarted != 0 || s.state.CompareAndSwap(st, st|slotGone) {
					return
				}
			}
		})
	}
	// An Ack that finds the lock taken while this waits applies its
	// settle itself (waiters), for cond.Wait lets go of the lock without
	// applying what is pending.
	r.waiters.Add(1)
	for r.drainLocked(); r.busyLocked(parts) && time.Now().Before(deadline); r.drainLocked() {
		if r.testHookWait != nil {
			r.testHookWait()
		}
		r.cond.Wait()
	}
	r.waiters.Add(-1)
	var offsets map[string]map[int32]kgo.EpochOffset
	if commit && !r.killed {
		offsets = r.dirtyLocked(parts)
	}
	r.forEachSlotLocked(parts, func(s *slot) { s.set(slotGone) })
	var paused []topicPartition
	r.forEachStateLocked(parts, func(st *partState) {
		if st.paused {
			paused = append(paused, st.tp)
		}
		if st.behind {
			st.behind = false
			r.behind--
		}
		delete(r.parts, st.tp)
	})
	r.cond.Broadcast()
	r.unlock()
	r.commit(ctx, offsets)
	// A partition assigned again later starts unpaused.
	r.resume(paused)
}

// forEachStateLocked calls fn with the state of every partition of parts
// the Receiver has.
func (r *Receiver) forEachStateLocked(parts map[string][]int32, fn func(*partState)) {
	for topic, ps := range parts {
		for _, p := range ps {
			if st := r.parts[topicPartition{topic, p}]; st != nil {
				fn(st)
			}
		}
	}
}

// forEachSlotLocked calls fn with every in-flight slot of parts not yet
// settled.
func (r *Receiver) forEachSlotLocked(parts map[string][]int32, fn func(*slot)) {
	r.forEachStateLocked(parts, func(st *partState) {
		for _, m := range st.inflight {
			if m.s != nil {
				fn(m.s)
			}
		}
	})
}

// busyLocked reports whether a record of parts is with the runtime: handed
// out and neither settled nor superseded.
func (r *Receiver) busyLocked(parts map[string][]int32) bool {
	busy := false
	r.forEachSlotLocked(parts, func(s *slot) {
		busy = busy || !s.done && !s.held && s.state.Load()&(slotGone|slotBack) == 0
	})
	return busy
}

// Prepare implements driver.Preparer: it checks that the brokers can be
// reached and that every consumed topic, tier topic and dead-letter topic
// exists, creating the missing ones with WithCreateTopics.
func (r *Receiver) Prepare(ctx context.Context, p driver.Plan) error {
	want := map[string]bool{}
	for _, t := range r.topics {
		want[t] = true
		for _, rt := range RetryTopics(t, r.cfg.tiers) {
			want[rt] = true
		}
		if p.DeadLetterQueue != nil {
			want[p.DeadLetterQueue(t)] = true
		}
	}
	names := make([]string, 0, len(want))
	for t := range want {
		names = append(names, t)
	}
	slices.Sort(names)
	adm := kadm.NewClient(r.cl)
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("babelqueue/kafka: cannot reach the brokers %s: %w", strings.Join(r.seeds, ","), r.unreachable(ctx, err))
	}
	var missing []string
	for _, t := range names {
		d, ok := details[t]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
		} else if d.Err != nil {
			return fmt.Errorf("babelqueue/kafka: topic %s: %w", t, d.Err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !r.cfg.createTopics {
		return &MissingTopicsError{Topics: missing}
	}
	resp, err := adm.CreateTopics(ctx, r.cfg.partitions, r.cfg.replication, nil, missing...)
	if err != nil {
		return fmt.Errorf("babelqueue/kafka: creating topics %s: %w", strings.Join(missing, ", "), err)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("babelqueue/kafka: creating topic %s: %w", t.Topic, t.Err)
		}
	}
	r.logger.Info("babelqueue/kafka: created missing topics", slog.Any("topics", missing))
	return nil
}

// unreachable prefers the connection error franz-go saw over a bare
// context deadline.
func (r *Receiver) unreachable(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if cause := r.conn.lastErr(); cause != nil {
			return fmt.Errorf("%v (no broker answered before the startup timeout: %w)", cause, err)
		}
		return fmt.Errorf("no broker answered before the startup timeout (%w)", err)
	}
	return err
}

// MissingTopicsError is the startup check's error when topics the consumer
// reads or writes do not exist.
type MissingTopicsError struct {
	Topics []string
}

// Error implements error.
func (e *MissingTopicsError) Error() string {
	return fmt.Sprintf("babelqueue/kafka: missing topics: %s (create them, or use kafka.WithCreateTopics)", strings.Join(e.Topics, ", "))
}

// Close commits every settled offset, leaves the group and closes the
// client. Records received but never settled are delivered again to the
// group.
func (r *Receiver) Close(ctx context.Context) error {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	r.lock()
	if r.closed {
		r.unlock()
		return nil
	}
	r.closed = true
	r.unlock()
	r.stopCommitLoop()
	r.lock()
	offsets := r.dirtyLocked(nil)
	r.unlock()
	r.commit(ctx, offsets)
	r.cl.CloseAllowingRebalance()
	return nil
}

// kill closes the client as a crash would: no final commit.
func (r *Receiver) kill() {
	r.lock()
	r.closed, r.killed = true, true
	r.unlock()
	r.stopCommitLoop()
	r.cl.CloseAllowingRebalance()
}
