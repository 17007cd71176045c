package exporter

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"
)

// serveTest serves the test handler on a loopback port until the test ends.
func serveTest(t *testing.T, o ServeOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, mustHandler(t), o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawConn is one keep-alive HTTP/1.1 connection, driven by hand so that
// the test knows which connection the server closed.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A guard against a hang, not a timing assertion.
	c.SetDeadline(time.Now().Add(time.Minute))
	return &rawConn{c, bufio.NewReader(c)}
}

// get sends one request and reads the response; an error means the
// server closed the connection.
func (c *rawConn) get(path string) (int, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: agent\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// TestConnCapClosesLongestIdle: at the cap a new connection is admitted
// by closing the connection idle longest; the others keep working.
func TestConnCapClosesLongestIdle(t *testing.T) {
	books := make(chan *conns, 1)
	addr := serveTest(t, ServeOptions{MaxConns: 3, Log: zerolog.Nop(), seeConns: func(c *conns) { books <- c }})
	cb := <-books
	var cs []*rawConn
	for i := range 3 {
		c := dial(t, addr)
		if code, err := c.get("/metrics"); err != nil || code != 200 {
			t.Fatalf("first requests: %d %v", code, err)
		}
		cs = append(cs, c)
		// The server marks a connection idle after the client has its
		// response: wait for it, so that idle order is dial order.
		for cb.idle() < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	// The fourth is admitted at once, although three are open and none
	// has timed out...
	c4 := dial(t, addr)
	if code, err := c4.get("/metrics"); err != nil || code != 200 {
		t.Fatalf("a connection beyond the cap: %d %v", code, err)
	}
	// ...by closing the first, idle longest.
	if _, err := cs[0].r.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Errorf("the longest-idle connection: read %v, want it closed", err)
	}
	for i, c := range cs[1:] {
		if code, err := c.get("/api/v1/snapshot"); err != nil || code != 200 {
			t.Errorf("connection %d after the eviction: %d %v", i+2, code, err)
		}
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

func TestConnCap(t *testing.T) {
	for _, tt := range []struct {
		nofile, mem uint64
		want        int
	}{
		{20000, 0, 18976}, {1024, 0, 512}, {1 << 20, 0, 1<<20 - 1024}, {2, 0, 1},
		{20000, 256 << 20, 3276}, // the unit's MemoryMax: memory bounds it
		{20000, 64 << 30, 18976}, {20000, 1 << 20, 16},
	} {
		if got := ConnCap(tt.nofile, tt.mem); got != tt.want {
			t.Errorf("ConnCap(%d, %d) = %d, want %d", tt.nofile, tt.mem, got, tt.want)
		}
	}
}

// TestWebConfigTLS: with a web config the server speaks TLS with the
// configured certificate (verified against its CA by a real client) and
// asks for the configured basic auth.
func TestWebConfigTLS(t *testing.T) {
	dir := t.TempDir()
	caPool := writeCerts(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "web.yml")
	writeFile(t, cfg, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: "+string(hash)+"\n")
	if err := ValidateWebConfig(cfg); err != nil {
		t.Fatal(err)
	}
	addr := serveTest(t, ServeOptions{WebConfigFile: cfg, Log: zerolog.Nop()})
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool}}}
	status := func(user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 {
			t.Error("response without a verified TLS chain")
		}
		return resp.StatusCode
	}
	if got := status("", ""); got != http.StatusUnauthorized {
		t.Errorf("no auth: %d, want 401", got)
	}
	if got := status("prometheus", "wrong"); got != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", got)
	}
	if got := status("prometheus", "s3cret"); got != http.StatusOK {
		t.Errorf("with auth: %d, want 200", got)
	}
	// A client that does not trust the CA fails the handshake.
	_, err = (&http.Client{Timeout: time.Minute}).Get("https://" + addr + "/metrics")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("client without the CA: %v, want an unknown authority", err)
	}
}

func TestValidateWebConfig(t *testing.T) {
	dir := t.TempDir()
	writeCerts(t, dir)
	for name, body := range map[string]string{
		"malformed":    "tls_server_config: [\n  nope",
		"unknown key":  "tls_server_config:\n  cert: x\n  bogus: 1\n",
		"missing cert": "tls_server_config:\n  cert_file: absent.crt\n  key_file: server.key\n",
		"bad hash":     "basic_auth_users:\n  u: plaintext\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yml")
		writeFile(t, p, body)
		err := ValidateWebConfig(p)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error", name, err)
		}
	}
	if err := ValidateWebConfig(filepath.Join(dir, "absent.yml")); err == nil {
		t.Error("a missing config file accepted")
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeCerts writes a CA-signed server.crt and server.key for 127.0.0.1
// into dir and returns a pool holding the CA.
func writeCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "agent"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "server.crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, filepath.Join(dir, "server.key"), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
