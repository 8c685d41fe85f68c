package fleet

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// counting is memberlist's own network transport with the bytes this member
// sends counted: packets (UDP: probes, gossip) and what it writes on
// streams (TCP: state exchanges, this package's messages), those it dials
// and those it accepts. Received bytes are the other members' sent ones.
type counting struct {
	*memberlist.NetTransport
	sent    *atomic.Int64
	streams chan net.Conn
	stop    chan struct{}
	once    sync.Once
}

// newTransport binds memberlist's transport as memberlist would (on port
// 0, a free port, retried when TCP and UDP cannot share one) and returns it
// with the port it bound.
func newTransport(host string, port int, logger *log.Logger, sent *atomic.Int64) (*counting, int, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: logger})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("gossip transport: %w", err)
	}
	t := &counting{NetTransport: nt, sent: sent, streams: make(chan net.Conn), stop: make(chan struct{})}
	go t.accept()
	return t, nt.GetAutoBindPort(), nil
}

// accept passes the streams other members open on, counted.
func (t *counting) accept() {
	in := t.NetTransport.StreamCh()
	for {
		select {
		case c := <-in:
			select {
			case t.streams <- countedConn{c, t.sent}:
			case <-t.stop:
				_ = c.Close()
				return
			}
		case <-t.stop:
			return
		}
	}
}

func (t *counting) StreamCh() <-chan net.Conn { return t.streams }

func (t *counting) WriteTo(b []byte, addr string) (time.Time, error) {
	t.sent.Add(int64(len(b)))
	return t.NetTransport.WriteTo(b, addr)
}

func (t *counting) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.sent.Add(int64(len(b)))
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *counting) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return countedConn{c, t.sent}, nil
}

func (t *counting) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return countedConn{c, t.sent}, nil
}

func (t *counting) Shutdown() error {
	t.once.Do(func() { close(t.stop) })
	return t.NetTransport.Shutdown()
}

// countedConn counts what is written on a stream.
type countedConn struct {
	net.Conn
	sent *atomic.Int64
}

func (c countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}
