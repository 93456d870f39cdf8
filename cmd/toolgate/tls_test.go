package main

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
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/server"
	"github.com/toolgate/toolgate/toolgatetest"
)

// pki is a CA and the certificates it signed, as PEM files in a directory.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	CAFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.ca, p.caKey, p.CAFile = p.issue(t, "ca", &x509.Certificate{
		Subject: pkix.Name{CommonName: "toolgate test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	return p
}

// issue writes name.pem (signed by the CA, or by itself for the CA) and
// name-key.pem, and returns the certificate's path.
func (p *pki) issue(t *testing.T, name string, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if p.ca != nil {
		parent, signer = p.ca, p.caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	path := filepath.Join(p.dir, name+".pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(p.dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return cert, key, path
}

// leaf issues a server or client certificate and returns its and its
// key's paths.
func (p *pki) leaf(t *testing.T, name string, usage x509.ExtKeyUsage) (cert, key string) {
	_, _, cert = p.issue(t, name, &x509.Certificate{
		Subject: pkix.Name{CommonName: name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	})
	return cert, filepath.Join(p.dir, name+"-key.pem")
}

// TestServeAndCLI_OverMutualTLS: a NATS server that verifies its clients'
// certificates, as a deployment with TLS runs one; serve's roles and the
// CLI reach it with --nats-tls-ca, --nats-tls-cert and --nats-tls-key (or
// the same keys of the config file), and without a client certificate the
// CLI is refused, saying why.
func TestServeAndCLI_OverMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	srvCert, srvKey := p.leaf(t, "nats", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := p.leaf(t, "toolgate", x509.ExtKeyUsageClientAuth)
	tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: p.CAFile, Verify: true})
	require.NoError(t, err)
	ns, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 5, NoSigs: true, NoLog: true,
	})
	require.NoError(t, err)
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	require.True(t, ns.ReadyForConnections(time.Minute), "the TLS NATS server never got ready")
	url := ns.ClientURL()

	toolgatetest.Start(t, toolgatetest.Options{NATS: url, Configure: func(c *server.Config) {
		c.Conn.TLSCA, c.Conn.TLSCert, c.Conn.TLSKey = p.CAFile, cliCert, cliKey
	}})
	noData := t.TempDir()
	withTLS := []string{"--nats", url, "--data", noData, "--nats-tls-ca", p.CAFile, "--nats-tls-cert", cliCert, "--nats-tls-key", cliKey}

	r := cliEnv(t, nil, append([]string{"submit", "--tool", "web_search", "--args", `{"query":"tls"}`, "--conversation", "tls", "--caller", "bot"}, withTLS...)...)
	require.Equal(t, exitOK, r.code, r.stderr)

	home := t.TempDir()
	cfg := filepath.Join(home, "toolgate", "config.yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(cfg), 0o700))
	require.NoError(t, os.WriteFile(cfg, []byte("nats: "+url+"\ndata: "+noData+"\nnats-tls-ca: "+p.CAFile+"\nnats-tls-cert: "+cliCert+"\nnats-tls-key: "+cliKey+"\n"), 0o600))
	r = cliEnv(t, map[string]string{"XDG_CONFIG_HOME": home}, "pending", "--conversation", "tls")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "web_search", "the call submitted over TLS, listed over TLS from the config file's settings")

	// A NATS context's ca, cert and key, as `nats context save --tlsca
	// --tlscert --tlskey` writes them.
	ctxHome := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ctxHome, "nats", "context"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(ctxHome, "nats", "context", "tls.json"),
		fmt.Appendf(nil, `{"url":%q,"ca":%q,"cert":%q,"key":%q}`, url, p.CAFile, cliCert, cliKey), 0o600))
	r = cliEnv(t, map[string]string{"XDG_CONFIG_HOME": ctxHome, "NATS_CONTEXT": "tls", "TOOLGATE_DATA": noData}, "pending", "--conversation", "tls")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "web_search", "listed with the NATS context's TLS settings")

	r = cliEnv(t, nil, "pending", "--nats", url, "--data", noData, "--nats-tls-ca", p.CAFile)
	assert.Equal(t, exitRefused, r.code, r.stdout)
	assert.Regexp(t, `(?i)certificate|tls`, r.stderr, "no client certificate: the error says TLS refused it")
	r = cliEnv(t, nil, "pending", "--nats", url, "--data", noData, "--nats-tls-cert", cliCert)
	assert.Equal(t, exitRefused, r.code, r.stdout)
	assert.Contains(t, r.stderr, "--nats-tls-cert and --nats-tls-key go together")
}
