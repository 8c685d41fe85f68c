// Package tlscert makes a throwaway certificate authority and a server
// certificate signed by it, for `pgfleet demo --tls` and the TLS tests. It is
// a leaf: it knows files and certificates, nothing of pgfleet.
package tlscert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Make wrote.
type Files struct {
	CA   string // the CA's certificate: a client's sslrootcert
	Cert string // the server's certificate
	Key  string // the server's private key (mode 0600)
}

// Make writes ca.crt, server.crt and server.key in dir: a new CA, and a
// server certificate it signed for hosts (IP addresses or DNS names, put in
// the subject alternative names that sslmode=verify-full checks). Both are
// valid from an hour ago for 90 days.
func Make(dir string, hosts ...string) (Files, error) {
	if len(hosts) == 0 {
		return Files{}, fmt.Errorf("tlscert: no host names")
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "pgfleet throwaway CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(90 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(90 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	for _, w := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{f.CA, "CERTIFICATE", caDER, 0o644},
		{f.Cert, "CERTIFICATE", der, 0o644},
		{f.Key, "PRIVATE KEY", keyDER, 0o600},
	} {
		b := pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der})
		if err := os.WriteFile(w.path, b, w.mode); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
