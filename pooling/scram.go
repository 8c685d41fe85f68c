package pooling

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// SCRAMKey is what logs a coordinator into a worker as a user without the
// user's password (SCRAM pass-through, as PgBouncer does it): the
// ClientKey the coordinator recovered from the client's own SCRAM proof,
// and the verifier's salt, iteration count and ServerKey, which the
// worker must hold too (the same verifier: a role made with the same
// password on two servers has two salts).
type SCRAMKey struct {
	Salt      []byte
	Iters     int
	ClientKey []byte
	ServerKey []byte
}

// errSCRAMSalt: the worker holds another verifier for the user.
var errSCRAMSalt = errors.New("the worker holds another SCRAM verifier for this user (another salt or iteration count) than the first worker")

// scramConn answers a worker's SCRAM-SHA-256 request with a SCRAMKey under
// pgconn, which only knows passwords: it reads the worker's messages until
// authentication ends, runs the exchange itself, and hands pgconn every
// other message (AuthenticationOk, an ErrorResponse) as the worker sent it.
// Then it is the bare connection.
type scramConn struct {
	net.Conn
	key   *SCRAMKey
	done  bool
	ahead bytes.Buffer // messages for pgconn, read from the worker
	err   error        // the exchange failed: pgconn reads it
}

func newSCRAMConn(c net.Conn, key *SCRAMKey) *scramConn {
	return &scramConn{Conn: c, key: key}
}

func (c *scramConn) Read(p []byte) (int, error) {
	for !c.done && c.ahead.Len() == 0 && c.err == nil {
		c.step()
	}
	if c.ahead.Len() > 0 {
		return c.ahead.Read(p)
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// step reads one message from the worker while authentication runs.
func (c *scramConn) step() {
	typ, body, err := readMessage(c.Conn)
	if err != nil {
		c.err = err
		return
	}
	if typ == 'R' && len(body) >= 4 && binary.BigEndian.Uint32(body) == 10 { // AuthenticationSASL
		var sasl pgproto3.AuthenticationSASL
		if err := sasl.Decode(body); err == nil && slices.Contains(sasl.AuthMechanisms, "SCRAM-SHA-256") {
			if err := c.exchange(); err != nil {
				c.err = err
			}
			return
		}
	}
	// Anything else goes to pgconn as it came: AuthenticationOk (then
	// the rest is pgconn's), an error, another method.
	c.ahead.Write(frame(typ, body))
	if typ == 'R' && len(body) >= 4 && binary.BigEndian.Uint32(body) == 0 || typ == 'E' {
		c.done = true
	}
}

// exchange runs SCRAM-SHA-256 (without channel binding) with the key.
func (c *scramConn) exchange() error {
	var nb [18]byte
	_, _ = rand.Read(nb[:])
	nonce := base64.StdEncoding.EncodeToString(nb[:])
	// The user name is the startup message's; SCRAM's is ignored by
	// PostgreSQL (and may be empty).
	first := "n=,r=" + nonce
	init := pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,," + first)}
	if err := c.send(&init); err != nil {
		return err
	}
	typ, body, err := readMessage(c.Conn)
	if err != nil {
		return err
	}
	if typ != 'R' || len(body) < 4 || binary.BigEndian.Uint32(body) != 11 { // AuthenticationSASLContinue
		return c.pass(typ, body)
	}
	serverFirst := string(body[4:])
	attrs := scramAttrs(serverFirst)
	salt, err := base64.StdEncoding.DecodeString(attrs["s"])
	if err != nil || !strings.HasPrefix(attrs["r"], nonce) {
		return fmt.Errorf("SCRAM: the worker's first message is malformed")
	}
	if iters, err := strconv.Atoi(attrs["i"]); err != nil || iters != c.key.Iters || !bytes.Equal(salt, c.key.Salt) {
		return errSCRAMSalt
	}
	final := "c=biws,r=" + attrs["r"]
	auth := []byte(first + "," + serverFirst + "," + final)
	stored := sha256.Sum256(c.key.ClientKey)
	sig := hmacSHA256(stored[:], auth)
	proof := make([]byte, len(sig))
	for i := range sig {
		proof[i] = c.key.ClientKey[i] ^ sig[i]
	}
	resp := pgproto3.SASLResponse{Data: []byte(final + ",p=" + base64.StdEncoding.EncodeToString(proof))}
	if err := c.send(&resp); err != nil {
		return err
	}
	typ, body, err = readMessage(c.Conn)
	if err != nil {
		return err
	}
	if typ != 'R' || len(body) < 4 || binary.BigEndian.Uint32(body) != 12 { // AuthenticationSASLFinal
		return c.pass(typ, body)
	}
	v, err := base64.StdEncoding.DecodeString(scramAttrs(string(body[4:]))["v"])
	if err != nil || !hmac.Equal(v, hmacSHA256(c.key.ServerKey, auth)) {
		return fmt.Errorf("SCRAM: the worker's signature does not match its verifier")
	}
	return nil
}

// pass hands pgconn a message the exchange did not expect (an error).
func (c *scramConn) pass(typ byte, body []byte) error {
	c.ahead.Write(frame(typ, body))
	c.done = true
	return nil
}

func (c *scramConn) send(m pgproto3.FrontendMessage) error {
	b, err := m.Encode(nil)
	if err != nil {
		return err
	}
	_, err = c.Conn.Write(b)
	return err
}

func readMessage(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(h[1:]))
	if n < 4 || n > 1<<20 {
		return 0, nil, fmt.Errorf("worker message of length %d during authentication", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return h[0], body, nil
}

func frame(typ byte, body []byte) []byte {
	b := make([]byte, 5, 5+len(body))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// scramAttrs splits a SCRAM message into its attributes (a=value,...).
func scramAttrs(msg string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(msg, ",") {
		if len(kv) >= 2 && kv[1] == '=' {
			out[kv[:1]] = kv[2:]
		}
	}
	return out
}

func hmacSHA256(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// ClientKeyFromProof recovers the ClientKey from a SCRAM-SHA-256 exchange
// a server verified against storedKey: the client's proof XOR the client
// signature of the exchange's messages (RFC 5802). clientFirst is the
// client's first message with its GS2 header, serverFirst the server's,
// clientFinal the client's final message with its proof.
func ClientKeyFromProof(storedKey []byte, clientFirst, serverFirst, clientFinal string) ([]byte, error) {
	// The bare first message: after the GS2 header's two commas.
	i := strings.IndexByte(clientFirst, ',')
	j := -1
	if i >= 0 {
		j = strings.IndexByte(clientFirst[i+1:], ',')
	}
	p := strings.LastIndex(clientFinal, ",p=")
	if j < 0 || p < 0 {
		return nil, errors.New("SCRAM: malformed client messages")
	}
	bare := clientFirst[i+1+j+1:]
	proof, err := base64.StdEncoding.DecodeString(clientFinal[p+3:])
	if err != nil || len(proof) != sha256.Size {
		return nil, errors.New("SCRAM: malformed client proof")
	}
	sig := hmacSHA256(storedKey, []byte(bare+","+serverFirst+","+clientFinal[:p]))
	key := make([]byte, len(proof))
	for k := range proof {
		key[k] = proof[k] ^ sig[k]
	}
	if h := sha256.Sum256(key); !hmac.Equal(h[:], storedKey) {
		return nil, errors.New("SCRAM: the proof does not match the verifier")
	}
	return key, nil
}
