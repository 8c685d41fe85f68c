package coordinator

import (
	"encoding/binary"
	"time"

	"github.com/pgfleet/pgfleet/internal/wire"
)

// Notifications (LISTEN/NOTIFY). LISTEN keeps the session on its server
// connection for good (pinned), and the worker sends NotificationResponse
// whenever a notification arrives while its backend is idle, which is when
// the session waits for its client. While it waits, watchServer relays what
// the worker sends then, as PostgreSQL sends it to an idle client.

// watchesServer reports whether the session, about to wait for its client,
// must also read its server connection: it keeps one for good (a LISTEN,
// or state pgfleet could not carry) and nothing is outstanding on it.
func (ss *session) watchesServer() bool {
	return ss.pinned != "" && ss.sc != nil && ss.qhead == len(ss.queue) && !ss.needSync
}

// watchServer relays the notifications and notices the held worker
// connection sends while the session waits for its client, until stop is
// called. It stops on its own at anything else (left unread, for the next
// statement's relay to find) or a failed read or write. stop ends the
// watcher and returns only once it is done: then the session owns both
// connections again.
func (ss *session) watchServer() (stop func()) {
	sc := ss.sc
	done := make(chan struct{})
	go func() {
		defer close(done)
		var out []byte
		for {
			typ, whole, err := sc.R.Whole()
			if err != nil || !whole || (typ != 'A' && typ != 'N') {
				return
			}
			f, err := sc.Next()
			if err != nil {
				return
			}
			out = wire.AppendFrame(out[:0], typ, f.Body)
			if typ == 'A' {
				ss.ownNotification(out[5:], sc.PID)
			}
			ss.clientMu.Lock()
			_, err = ss.conn.Write(out)
			ss.clientMu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return func() {
		_ = sc.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = sc.SetReadDeadline(time.Time{})
	}
}

// ownNotification gives a notification the session itself sent (from
// backend pid, its worker connection's) the session's own process ID, the
// one its client was told in BackendKeyData, as PostgreSQL names the
// sender: clients compare it to their own to skip their notifications.
// Notifications from other sessions keep the worker's backend pid, which
// names no session of this coordinator (coordinator pids are random).
func (ss *session) ownNotification(body []byte, pid uint32) {
	if len(body) >= 4 && binary.BigEndian.Uint32(body) == pid {
		binary.BigEndian.PutUint32(body, ss.pid)
	}
}
