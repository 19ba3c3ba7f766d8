#!/usr/bin/python3
"""A small AMQP 1.0 server that speaks enough of Azure Service Bus for the
azservicebus Go client, for the azureservicebus module's integration tests.

It is a test double of the protocol, not a broker: one process, queues
created on first use (in memory, or with --data-dir in SQLite there, so a
server killed and started again on the same directory keeps its messages),
and only what the transport uses:

- SASL ANONYMOUS and claims-based authorisation: put-token requests on $cbs are
  answered with status-code 202;
- queues with peek-lock delivery: each delivery's tag is its 16-byte lock
  token, the header's delivery-count is the number of earlier failed
  deliveries (the client adds one), annotations x-opt-locked-until,
  x-opt-sequence-number and x-opt-enqueued-time;
- settlement: accepted completes, modified (abandon) raises the delivery count,
  released returns the message untouched, rejected with
  com.microsoft:dead-letter moves it to "<queue>/$DeadLetterQueue" with its
  DeadLetterReason and DeadLetterErrorDescription;
- lock expiry after --lock-duration: the message comes back with the delivery
  count raised, and a later settlement or renewal of the old lock fails with
  com.microsoft:message-lock-lost (status 410 on $management);
- $management: com.microsoft:renew-lock, and com.microsoft:peek-message
  (browse from a sequence number, without locking);
- scheduled messages (x-opt-scheduled-enqueue-time);
- topics: a subscription "<topic>/Subscriptions/<name>" exists from the first
  link attached to it, and a message sent to a topic with subscriptions is
  copied into each of them;
- sessions on the queues whose name ends with --session-suffix: a message
  without a session id (group-id) is rejected; receivers must attach with the
  com.microsoft:session-filter source filter, naming a session or none (the
  next session with available messages, the attach answered when one has
  some or failed with com.microsoft:timeout after the link's
  com.microsoft:timeout); the granted session id is echoed in the filter and
  its lock expiry in the com.microsoft:locked-until-utc link property; one
  session is locked by one link at a time (com.microsoft:session-cannot-be-
  locked otherwise), its messages are delivered in sequence order under the
  session lock, com.microsoft:renew-session-lock on $management extends it,
  and when it expires the link is detached with com.microsoft:session-lock-lost
  and its unsettled messages come back with the delivery count raised, as
  they do when the link closes.

Usage: sbserver.py --port PORT [--lock-duration SECONDS] [--session-suffix S]
[--data-dir DIR].
It listens on 127.0.0.1 only and prints "ready" when it accepts connections.
"""

import argparse
import os
import secrets
import sqlite3
import sys
import time
import uuid

from proton import Array, Condition, Data, Delivery, Message, UNDESCRIBED, int32, symbol, timestamp, ulong
from proton import Described, Terminus
from proton.handlers import EndpointStateHandler, IncomingMessageHandler, MessagingHandler
from proton.reactor import Container

DEAD_LETTER = "com.microsoft:dead-letter"
LOCK_LOST = "com.microsoft:message-lock-lost"
DLQ_SUFFIX = "/$DeadLetterQueue"
SESSION_FILTER = "com.microsoft:session-filter"
SESSION_FILTER_CODE = 0x00000137000000C
SESSION_LOCK_LOST = "com.microsoft:session-lock-lost"
SESSION_CANNOT_BE_LOCKED = "com.microsoft:session-cannot-be-locked"
TIMEOUT = "com.microsoft:timeout"
NOT_ALLOWED = "amqp:not-allowed"
LOCKED_UNTIL_UTC = "com.microsoft:locked-until-utc"
EPOCH_TICKS = 621355968000000000  # 1970-01-01 in .NET ticks (100 ns)
NO_SESSION = object()  # the filter value of "accept the next session"


def now_ms():
    return int(time.time() * 1000)


class Entry:
    def __init__(self, msg, seq):
        self.msg = msg
        self.seq = seq
        self.enqueued = now_ms()
        self.visible_at = self.enqueued
        self.failed_deliveries = 0
        self.tag = None  # current lock token while locked
        self.locked_until = 0
        self.session = None  # the session id on a session-enabled queue

    def scheduled(self):
        ann = self.msg.annotations or {}
        t = ann.get(symbol("x-opt-scheduled-enqueue-time"))
        if t is not None:
            self.visible_at = max(self.visible_at, int(t))


def sections(raw):
    """The top-level described values of an encoded message, in order."""
    data, out, offset = Data(), [], 0
    while offset < len(raw):
        data.clear()
        n = data.decode(raw[offset:])
        if n <= 0:
            break
        offset += n
        data.rewind()
        data.next()
        out.append(data.get_object())
    return out


def looks_like_message(b):
    # an encoded message starts with a described section, 0x00 0x53 0x70..0x78
    return len(b) > 3 and b[0] == 0x00 and b[1] == 0x53 and 0x70 <= b[2] <= 0x78


def split_batch(raw):
    """Service Bus batches are one message whose data sections (0x75) each
    hold an encoded message; anything else is one message."""
    try:
        datas = [bytes(v.value) for v in sections(raw)
                 if isinstance(v, Described) and v.descriptor == 0x75]
    except Exception:
        datas = []
    if datas and (len(datas) > 1 or looks_like_message(datas[0])) and all(map(looks_like_message, datas)):
        out = []
        for b in datas:
            m = Message()
            m.decode(b)
            out.append(m)
        return out
    m = Message()
    m.decode(raw)
    return [m]


class Store:
    """Write-through persistence of queue entries (and topic subscriptions)
    in SQLite, committed statement by statement, so that a kill -9 loses
    nothing that was acknowledged. Locks are not kept: after a restart every
    message is available, its delivery count as it was."""

    def __init__(self, data_dir):
        self.db = None
        if data_dir:
            os.makedirs(data_dir, exist_ok=True)
            self.db = sqlite3.connect(os.path.join(data_dir, "sbserver.sqlite"), isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("CREATE TABLE IF NOT EXISTS entries (queue TEXT, seq INTEGER PRIMARY KEY, msg BLOB,"
                            " enqueued INTEGER, visible_at INTEGER, failed INTEGER, session TEXT)")
            self.db.execute("CREATE TABLE IF NOT EXISTS subscriptions (topic TEXT, path TEXT, PRIMARY KEY (topic, path))")

    def save(self, name, e):
        if self.db is not None:
            self.db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (name, e.seq, e.msg.encode(), e.enqueued, e.visible_at, e.failed_deliveries, e.session))

    def delete(self, e):
        if self.db is not None:
            self.db.execute("DELETE FROM entries WHERE seq = ?", (e.seq,))

    def subscribe(self, topic, path):
        if self.db is not None:
            self.db.execute("INSERT OR IGNORE INTO subscriptions VALUES (?, ?)", (topic, path))

    def load(self):
        """Returns ({queue: [Entry]}, {topic: [path]}, highest seq)."""
        queues, subs, top = {}, {}, 0
        if self.db is None:
            return queues, subs, top
        for name, seq, raw, enqueued, visible_at, failed, session in self.db.execute(
                "SELECT queue, seq, msg, enqueued, visible_at, failed, session FROM entries ORDER BY seq"):
            m = Message()
            m.decode(raw)
            e = Entry(m, seq)
            e.enqueued, e.visible_at, e.failed_deliveries, e.session = enqueued, visible_at, failed, session
            queues.setdefault(name, []).append(e)
            top = max(top, seq)
        for topic, path in self.db.execute("SELECT topic, path FROM subscriptions"):
            subs.setdefault(topic, []).append(path)
        return queues, subs, top


class SessionLock:
    def __init__(self, queue, sid, link, until):
        self.queue = queue
        self.sid = sid
        self.link = link
        self.locked_until = until


def session_filter(link):
    """The value of the remote source's session filter: NO_SESSION for
    "next available", the session id, or None without the filter."""
    f = link.remote_source.filter
    f.rewind()
    if not f.next():
        return None
    filters = f.get_object() or {}
    for name, value in filters.items():
        if str(name) == SESSION_FILTER:
            v = value.value if isinstance(value, Described) else value
            return NO_SESSION if v is None else str(v)
    return None


class Endpoints(EndpointStateHandler):
    """Opens remotely opened links unless the server defers the answer (an
    accept-next-session attach waits for a session to become available)."""

    def __init__(self, server):
        super().__init__(False, server)
        self.server = server

    def on_link_remote_open(self, event):
        if self.is_local_uninitialised(event.link):
            if not self.server.open_link(event.link):
                return
        super().on_link_remote_open(event)


class Server(MessagingHandler):
    def __init__(self, port, lock_ms, session_suffix, data_dir=None):
        super().__init__(prefetch=100, auto_accept=False, auto_settle=True)
        # Incoming transfers are read raw here (on_delivery) so that a batch
        # (one AMQP message whose data sections are encoded messages) can be
        # split; proton's own handler would decode only one body section.
        self.handlers = [Endpoints(self) if isinstance(h, EndpointStateHandler) else h
                         for h in self.handlers if not isinstance(h, IncomingMessageHandler)]
        self.port = port
        self.lock_ms = lock_ms
        self.session_suffix = session_suffix
        self.sessions = {}  # (queue, session id) -> SessionLock
        self.session_links = {}  # link -> SessionLock
        self.pending = []  # (link, queue, deadline ms): accept-next attaches waiting
        self.subscriptions = {}  # topic -> [subscription entity path]
        self.queues = {}  # name -> [Entry]
        self.consumers = {}  # name -> [link]
        self.reply_links = {}  # reply-to address -> link
        self.locked = {}  # tag -> (queue name, Entry)
        self.seq = 0
        self.store = Store(data_dir)
        self.queues, self.subscriptions, self.seq = self.store.load()

    # -- wiring -------------------------------------------------------------

    def on_start(self, event):
        event.container.listen("127.0.0.1:%d" % self.port)
        event.container.schedule(0.05, self)
        print("ready", flush=True)

    def on_timer_task(self, event):
        self.expire_locks()
        self.expire_sessions()
        self.grant_pending()
        for name in list(self.consumers):
            self.pump(name)
        for lock in list(self.session_links.values()):
            self.pump_session(lock)
        event.container.schedule(0.05, self)

    def is_session_queue(self, name):
        return bool(self.session_suffix) and name.endswith(self.session_suffix)

    def register(self, address):
        """Makes a subscription known when a link names it."""
        topic, sep, _ = address.partition("/Subscriptions/")
        if sep:
            path = address.split("/$")[0]
            subs = self.subscriptions.setdefault(topic, [])
            if path not in subs:
                subs.append(path)
                self.store.subscribe(topic, path)

    def open_link(self, link):
        """Called before a remotely opened link is opened here; False defers
        or refuses it (this method then answers the attach itself)."""
        if link.is_receiver:
            self.register(link.remote_target.address or "")
            return True
        address = link.remote_source.address
        self.register(address)
        if address == "$cbs" or address.endswith("$management"):
            return True
        sid = session_filter(link)
        if self.is_session_queue(address):
            if sid is None:
                self.refuse(link, NOT_ALLOWED, "The entity %s requires sessions: a receiver must accept a session." % address)
                return False
            if sid is NO_SESSION:
                timeout = (link.remote_properties or {}).get(symbol(TIMEOUT), 60000)
                self.pending.append((link, address, now_ms() + int(timeout)))
                self.grant_pending()
                return False
            lock = self.sessions.get((address, sid))
            if lock is not None and lock.link is not None:
                self.refuse(link, SESSION_CANNOT_BE_LOCKED, "The session %s is locked by another receiver." % sid)
                return False
            self.grant(link, address, sid)
            return False
        if sid is not None:
            self.refuse(link, NOT_ALLOWED, "The entity %s does not have sessions enabled." % address)
            return False
        return True

    def refuse(self, link, condition, description):
        # A refused attach: answered with a null source, then detached with
        # the error (AMQP 1.0 section 2.6.3).
        link.source.type = Terminus.UNSPECIFIED
        link.target.address = link.remote_target.address
        link.open()
        link.condition = Condition(symbol(condition), description)
        link.close()

    def available_session(self, queue):
        t = now_ms()
        for e in self.queues.get(queue, []):
            if e.session is None or e.tag is not None or e.visible_at > t:
                continue
            lock = self.sessions.get((queue, e.session))
            if lock is None or lock.link is None:
                return e.session
        return None

    def grant_pending(self):
        t = now_ms()
        for item in list(self.pending):
            link, queue, deadline = item
            if not (link.state & link.REMOTE_ACTIVE):
                self.pending.remove(item)
                continue
            sid = self.available_session(queue)
            if sid is not None:
                self.pending.remove(item)
                self.grant(link, queue, sid)
            elif deadline <= t:
                self.pending.remove(item)
                self.refuse(link, TIMEOUT, "No session available to accept within the timeout.")

    def grant(self, link, queue, sid):
        until = now_ms() + self.lock_ms
        lock = SessionLock(queue, sid, link, until)
        self.sessions[(queue, sid)] = lock
        self.session_links[link] = lock
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.source.address = queue
        link.target.address = link.remote_target.address
        link.source.filter.put_object({symbol(SESSION_FILTER): Described(ulong(SESSION_FILTER_CODE), sid)})
        link.properties = {symbol(LOCKED_UNTIL_UTC): EPOCH_TICKS + until * 10000}
        link.open()
        self.pump_session(lock)

    def release_session(self, lock):
        """Ends lock's hold on its session: its unsettled messages become
        available again."""
        if self.sessions.get((lock.queue, lock.sid)) is lock:
            del self.sessions[(lock.queue, lock.sid)]
        if lock.link is not None:
            self.session_links.pop(lock.link, None)
            lock.link = None
        for tag, (name, e) in list(self.locked.items()):
            if name == lock.queue and e.session == lock.sid:
                self.unlock(tag)
                e.failed_deliveries += 1
                self.store.save(name, e)
        self.grant_pending()

    def expire_sessions(self):
        t = now_ms()
        for lock in list(self.session_links.values()):
            if lock.locked_until < t:
                link = lock.link
                self.release_session(lock)
                link.condition = Condition(symbol(SESSION_LOCK_LOST), "The session lock has expired.")
                link.close()

    def on_link_opening(self, event):
        link = event.link
        # Agree to the settlement modes the client asks for (RPC links want
        # pre-settled replies; peek-lock wants receiver-settle-mode second).
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        if link.is_sender:
            address = link.remote_source.address
            link.source.address = address
            link.target.address = link.remote_target.address
            if address == "$cbs" or address.endswith("$management"):
                self.reply_links[link.remote_target.address] = link
            else:
                self.consumers.setdefault(address, []).append(link)
        else:
            link.target.address = link.remote_target.address
            link.source.address = link.remote_source.address
            link.max_message_size = 256 * 1024

    def on_link_closing(self, event):
        self.forget(event.link)

    def on_disconnected(self, event):
        if event.connection is not None:
            link = event.connection.link_head(0)
            while link:
                self.forget(link)
                link = link.next(0)

    def forget(self, link):
        lock = self.session_links.get(link)
        if lock is not None:
            self.release_session(lock)
        for links in self.consumers.values():
            if link in links:
                links.remove(link)
        for address, l in list(self.reply_links.items()):
            if l is link:
                del self.reply_links[address]

    def on_sendable(self, event):
        lock = self.session_links.get(event.link)
        if lock is not None:
            self.pump_session(lock)
            return
        address = event.link.source.address
        if address in self.consumers:
            self.pump(address)

    # -- incoming messages --------------------------------------------------

    def on_delivery(self, event):
        d = event.delivery
        if not d.link.is_receiver or not d.readable or d.partial:
            return
        raw = d.link.recv(d.pending)
        d.link.advance()
        address = d.link.target.address
        if address == "$cbs" or address.endswith("$management"):
            msg = Message()
            msg.decode(raw)
            if address == "$cbs":
                self.reply(msg, 202, "Accepted")
            else:
                self.management(address, msg)
        else:
            msgs = split_batch(raw)
            if any(self.is_session_queue(path) for path in self.subscriptions.get(address, [address])) and any(not m.group_id for m in msgs):
                d.local.condition = Condition(symbol(NOT_ALLOWED), (
                    "The SessionId was not set on a message, and it cannot be sent to the entity %s. "
                    "Entities that have session support enabled can only receive messages that have the SessionId set." % address))
                d.update(Delivery.REJECTED)
                d.settle()
                return
            for msg in msgs:
                self.enqueue(address, msg)
        d.update(Delivery.ACCEPTED)
        d.settle()

    def enqueue(self, name, msg):
        subs = self.subscriptions.get(name)
        if subs:
            raw = msg.encode()
            for path in subs:
                copy = Message()
                copy.decode(raw)
                self.enqueue(path, copy)
            return
        self.seq += 1
        e = Entry(msg, self.seq)
        if self.is_session_queue(name):
            e.session = msg.group_id
        e.scheduled()
        self.queues.setdefault(name, []).append(e)
        self.store.save(name, e)
        self.pump(name)
        if e.session is not None:
            lock = self.sessions.get((name, e.session))
            if lock is not None and lock.link is not None:
                self.pump_session(lock)
            else:
                self.grant_pending()

    def reply(self, request, code, description, body=None):
        link = self.reply_links.get(request.reply_to)
        if link is None:
            return
        resp = Message(body=body, correlation_id=request.id,
                       properties={"status-code": int32(code), "statusDescription": description})
        link.send(resp)

    def management(self, address, msg):
        op = (msg.properties or {}).get("operation")
        if op == "com.microsoft:renew-lock":
            tokens = (msg.body or {}).get("lock-tokens") or []
            tokens = getattr(tokens, "elements", tokens)
            expirations = []
            for t in tokens:
                # The client reads the delivery tag as a .NET GUID, so the
                # token's mixed-endian bytes are the tag.
                raw = t.bytes_le if isinstance(t, uuid.UUID) else bytes(t)
                hit = self.locked.get(raw.decode("ascii", "replace"))
                if hit is None:
                    self.reply(msg, 410, "The lock supplied is invalid: it expired or the message was settled. " + LOCK_LOST)
                    return
                e = hit[1]
                e.locked_until = now_ms() + self.lock_ms
                expirations.append(timestamp(e.locked_until))
            body = {"expirations": Array(UNDESCRIBED, Data.TIMESTAMP, *expirations)}
            self.reply(msg, 200, "OK", body)
        elif op == "com.microsoft:renew-session-lock":
            queue = address[:-len("/$management")]
            sid = str((msg.body or {}).get("session-id"))
            lock = self.sessions.get((queue, sid))
            if lock is None or lock.link is None or lock.locked_until < now_ms():
                self.reply(msg, 410, "The session lock has expired. " + SESSION_LOCK_LOST)
                return
            lock.locked_until = now_ms() + self.lock_ms
            self.reply(msg, 200, "OK", {"expiration": timestamp(lock.locked_until)})
        elif op == "com.microsoft:peek-message":
            # Browse without locking: the messages from from-sequence-number
            # on, in sequence order (queues are created on first use, so the
            # entity always exists).
            queue = address[:-len("/$management")]
            body = msg.body or {}
            start = int(body.get("from-sequence-number", 0) or 0)
            count = int(body.get("message-count", 1) or 1)
            entries = sorted((e for e in self.queues.get(queue, []) if e.seq >= start), key=lambda e: e.seq)[:count]
            if not entries:
                self.reply(msg, 204, "No messages")
                return
            out = []
            for e in entries:
                m = Message()
                m.decode(e.msg.encode())
                ann = dict(m.annotations or {})
                ann[symbol("x-opt-sequence-number")] = e.seq
                ann[symbol("x-opt-enqueued-time")] = timestamp(e.enqueued)
                m.annotations = ann
                m.delivery_count = e.failed_deliveries
                out.append({"message": m.encode()})
            self.reply(msg, 200, "OK", {"messages": out})
        else:
            self.reply(msg, 501, "operation %r is not implemented by this test server" % op)

    # -- delivery -----------------------------------------------------------

    def pump(self, name):
        links = [l for l in self.consumers.get(name, []) if l.state & l.LOCAL_ACTIVE]
        if not links:
            return
        t = now_ms()
        for e in self.queues.get(name, []):
            if e.tag is not None or e.visible_at > t or e.session is not None:
                continue
            link = next((l for l in links if l.credit > 0), None)
            if link is None:
                return
            self.deliver(name, e, link)

    def pump_session(self, lock):
        """Delivers the session's available messages in sequence order, all
        under the session lock."""
        link = lock.link
        if link is None or not (link.state & link.LOCAL_ACTIVE):
            return
        t = now_ms()
        for e in self.queues.get(lock.queue, []):
            if link.credit <= 0:
                return
            if e.session != lock.sid or e.tag is not None or e.visible_at > t:
                continue
            self.deliver(lock.queue, e, link, lock.locked_until)

    def deliver(self, name, e, link, locked_until=None):
        # 16 ASCII characters: exactly the 16 bytes the client turns into the
        # lock token (proton's binding takes delivery tags as str).
        tag = secrets.token_hex(8)
        e.tag = tag
        e.locked_until = locked_until or now_ms() + self.lock_ms
        self.locked[tag] = (name, e)
        msg = e.msg
        ann = dict(msg.annotations or {})
        ann[symbol("x-opt-locked-until")] = timestamp(e.locked_until)
        ann[symbol("x-opt-sequence-number")] = e.seq
        ann[symbol("x-opt-enqueued-time")] = timestamp(e.enqueued)
        msg.annotations = ann
        msg.delivery_count = e.failed_deliveries
        link.send(msg, tag=tag)

    def unlock(self, tag):
        if isinstance(tag, bytes):
            tag = tag.decode("ascii", "replace")
        hit = self.locked.pop(tag, None)
        if hit is None:
            return None, None
        name, e = hit
        e.tag = None
        return name, e

    def expire_locks(self):
        t = now_ms()
        for tag, (name, e) in list(self.locked.items()):
            if e.session is None and e.locked_until < t:
                self.unlock(tag)
                e.failed_deliveries += 1
                self.store.save(name, e)

    def lock_lost(self, delivery):
        delivery.local.condition = Condition(symbol(LOCK_LOST), "The lock supplied is invalid: it expired or the message was settled.")
        delivery.update(Delivery.REJECTED)

    def on_accepted(self, event):
        self.settled(self.complete, event)

    def on_rejected(self, event):
        self.settled(self.reject, event)

    def on_released(self, event):
        self.settled(self.release, event)

    def settled(self, outcome, event):
        # outcome(delivery, queue name, entry) runs on a delivery whose lock
        # is still held; a stale lock token is refused as lock lost. In
        # receiver-settle-mode second the client waits for our settlement
        # (proton's auto_settle only settles what the peer settled first).
        d = event.delivery
        try:
            name, e = self.unlock(d.tag)
            if e is None:
                self.lock_lost(d)
            else:
                outcome(d, name, e)
        finally:
            d.settle()
        lock = self.session_links.get(event.link)
        if lock is not None:
            self.pump_session(lock)

    def complete(self, d, name, e):
        self.queues[name].remove(e)
        self.store.delete(e)

    def reject(self, d, name, e):
        cond = d.remote.condition
        if cond is not None and str(cond.name) == DEAD_LETTER:
            self.queues[name].remove(e)
            self.store.delete(e)
            info = cond.info or {}
            props = dict(e.msg.properties or {})
            for key in ("DeadLetterReason", "DeadLetterErrorDescription"):
                value = info.get(symbol(key), info.get(key))
                if value is not None:
                    props[key] = str(value)
            e.msg.properties = props
            e.failed_deliveries += 1
            self.enqueue(name + DLQ_SUFFIX, e.msg)
        else:
            e.failed_deliveries += 1
            self.store.save(name, e)
        self.pump(name)

    def release(self, d, name, e):
        if d.remote_state == Delivery.MODIFIED:
            # Service Bus counts an abandon (modified) as a failed delivery,
            # whatever its delivery-failed flag; a release does not count.
            e.failed_deliveries += 1
            if d.remote.annotations:
                props = dict(e.msg.properties or {})
                props.update({str(k): v for k, v in d.remote.annotations.items()})
                e.msg.properties = props
            self.store.save(name, e)
        self.pump(name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--lock-duration", type=float, default=30.0, help="seconds")
    p.add_argument("--session-suffix", default="-sessions",
                   help="queues whose name ends with this are session-enabled")
    p.add_argument("--data-dir", help="keep the queues in SQLite in this directory (survives a restart)")
    args = p.parse_args()
    c = Container(Server(args.port, int(args.lock_duration * 1000), args.session_suffix, args.data_dir))
    c.allowed_mechs = "ANONYMOUS"
    c.sasl_enabled = True
    try:
        c.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
