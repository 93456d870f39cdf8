package worker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

// The email channel against a real SMTP server that keeps what it
// receives: mailpit, built from its module by the test and started with
// TLS and authentication; its HTTP API reads the messages back.

const mailpitVersion = "v1.33.1"

var mailpitBuild struct {
	once sync.Once
	path string
	err  error
}

// mailpitBinary builds mailpit once, into the user's cache directory,
// where later runs find it.
func mailpitBinary(t *testing.T) string {
	t.Helper()
	mailpitBuild.once.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "toolgate-test", "mailpit-"+mailpitVersion)
		path := filepath.Join(dir, "mailpit")
		if _, err := os.Stat(path); err == nil {
			mailpitBuild.path = path
			return
		}
		cmd := exec.Command("go", "install", "github.com/axllent/mailpit@"+mailpitVersion)
		cmd.Dir = os.TempDir() // outside toolgate's module: mailpit's own requirements
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			mailpitBuild.err = fmt.Errorf("go install mailpit %s: %v\n%s", mailpitVersion, err, out)
			return
		}
		mailpitBuild.path = path
	})
	require.NoError(t, mailpitBuild.err)
	return mailpitBuild.path
}

// mailpit is a running mailpit: its SMTP address and its HTTP API.
type mailpit struct {
	smtp, api string
}

// startMailpit starts mailpit with a certificate for 127.0.0.1, taking
// mail only over TLS (implicit: smtps; else STARTTLS) and only from user
// with password. It returns mailpit and the roots that trust it.
func startMailpit(t *testing.T, implicitTLS bool, user, password string) (*mailpit, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, roots := selfSigned(t, dir)
	auth := filepath.Join(dir, "smtp-auth")
	require.NoError(t, os.WriteFile(auth, []byte(user+":"+password+"\n"), 0o600))
	mp := &mailpit{smtp: fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t)), api: fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))}
	tlsFlag := "--smtp-require-starttls"
	if implicitTLS {
		tlsFlag = "--smtp-require-tls"
	}
	cmd := exec.Command(mailpitBinary(t), "--smtp", mp.smtp, "--listen", mp.api, "--database", filepath.Join(dir, "mail.db"),
		"--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, tlsFlag, "--smtp-auth-file", auth, "--smtp-disable-rdns")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("mailpit's output:\n%s", out.String())
		}
	})
	bustest.Eventually(t, 30*time.Second, 20*time.Millisecond, "mailpit answers", func() (bool, any) {
		resp, err := http.Get("http://" + mp.api + "/api/v1/messages")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		c, err := net.Dial("tcp", mp.smtp)
		if err != nil {
			return false, err
		}
		c.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return mp, roots
}

// selfSigned writes a certificate and key for 127.0.0.1 to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// mailpitMessage is a message as mailpit's API gives it.
type mailpitMessage struct {
	ID       string
	Subject  string
	From     struct{ Address string }
	To       []struct{ Address string }
	Username string
	Text     string
	HTML     string
}

// messages reads back what mailpit received, oldest first, once it holds
// n.
func (mp *mailpit) messages(t *testing.T, n int) []mailpitMessage {
	t.Helper()
	var list struct {
		Messages []mailpitMessage `json:"messages"`
	}
	bustest.Eventually(t, ntWait, 20*time.Millisecond, fmt.Sprintf("mailpit holds %d messages", n), func() (bool, any) {
		resp, err := http.Get("http://" + mp.api + "/api/v1/messages")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		list.Messages = nil
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return false, err
		}
		var subjects []string
		for _, m := range list.Messages {
			subjects = append(subjects, m.Subject)
		}
		return len(list.Messages) >= n, subjects
	})
	out := make([]mailpitMessage, 0, len(list.Messages))
	for i := len(list.Messages) - 1; i >= 0; i-- { // the API lists the newest first
		var m mailpitMessage
		resp, err := http.Get("http://" + mp.api + "/api/v1/message/" + list.Messages[i].ID)
		require.NoError(t, err)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		resp.Body.Close()
		out = append(out, m)
	}
	return out
}

// A call asked, reminded, escalated and approved is four messages, each
// with a text and an HTML part that say the call's description, caller,
// cost and deadline; those that wait for a decision carry its links, one
// time ones where the channel names an approver. The password comes from
// the environment, and the server is reached over STARTTLS.
func TestNotifier_EmailTellsOfAskReminderEscalationAndOutcome(t *testing.T) {
	mp, roots := startMailpit(t, false, "toolgate", "smtp-password-1")
	t.Setenv("TOOLGATE_TEST_SMTP_PASSWORD", "smtp-password-1")
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  approvalTimeoutMs: 60000
  approvalReminderPercent: 2
  approvers: [alice, bob]
  escalate: [{afterMs: 2500, to: [oncall]}]
  inboxUrl: "https://toolgate.example/"
  describe:
    send_email: 'Send an email to {{.to}}'
  notify:
    - type: email
      url: smtp://%s
      from: "toolgate <toolgate@example.com>"
      to: [alice@example.com, bob@example.com]
      username: toolgate
      secret: env:TOOLGATE_TEST_SMTP_PASSWORD
      approver: alice
`, mp.smtp))
	issuer := &ntIssuer{}
	counts := &ntCounts{}
	ntStart(t, env, engine, counts, append(ntFast(3), worker.WithDecisionTokens(issuer), worker.WithSMTPTLSConfig(&tls.Config{RootCAs: roots}))...)
	startTimer(t, env, new(toolgatetest.Clock)) // on time.Now, as m is
	e := ntSubmit(t, m, machine.Call{CallerBotID: "finance-agent", EstimatedCost: 2.5})

	asked := mp.messages(t, 1)[0]
	assert.Equal(t, "Approval needed: send_email: Send an email to cfo@example.com", asked.Subject)
	assert.Equal(t, "toolgate@example.com", asked.From.Address)
	require.Len(t, asked.To, 2)
	assert.Equal(t, "bob@example.com", asked.To[1].Address)
	assert.Equal(t, "toolgate", asked.Username, "authenticated")
	deadline := time.UnixMilli(e.ApprovalTimeoutAt).UTC().Format("2006-01-02 15:04:05 UTC")
	for part, body := range map[string]string{"text": asked.Text, "html": asked.HTML} {
		for _, want := range []string{"Send an email to cfo@example.com", "finance-agent", "conv-1", "2.5", deadline,
			"https://toolgate.example" + worker.DecisionTokenPath + "approve-alice",
			"https://toolgate.example" + worker.DecisionTokenPath + "reject-alice",
			"https://toolgate.example/#/calls/" + e.PendingID} {
			assert.Contains(t, body, want, "the %s part", part)
		}
	}
	assert.Contains(t, asked.HTML, `<a href="https://toolgate.example`+worker.DecisionTokenPath+`approve-alice">Approve</a>`)

	msgs := mp.messages(t, 3)
	assert.Equal(t, "Reminder: send_email still needs a decision: Send an email to cfo@example.com", msgs[1].Subject)
	assert.Contains(t, msgs[1].Text, worker.DecisionTokenPath+"approve-alice")
	assert.Equal(t, "Escalated: send_email still needs a decision (alice, bob, oncall may decide): Send an email to cfo@example.com", msgs[2].Subject)
	assert.Contains(t, msgs[2].Text, worker.DecisionTokenPath+"reject-alice")

	_, err := m.Decide(t.Context(), e.PendingID, machine.Decision{Approve: true, By: "oncall"})
	require.NoError(t, err)
	msgs = mp.messages(t, 4)
	require.Len(t, msgs, 4, "asked, reminded, escalated and approved")
	assert.Equal(t, "send_email approved by oncall: Send an email to cfo@example.com", msgs[3].Subject)
	assert.NotContains(t, msgs[3].Text, worker.DecisionTokenPath, "a decided call offers no decision")
	assert.Contains(t, msgs[3].HTML, "https://toolgate.example/#/calls/"+e.PendingID)
	assert.Equal(t, 4, counts.get("email/sent"))
	assert.Equal(t, 3, issuer.count(), "one-time links for the three messages that wait for a decision")
}

// smtps:// is TLS from the first byte; a password the server refuses is
// a refusal retrying cannot fix: dead-lettered at the first attempt,
// naming the server and never the password.
func TestNotifier_EmailImplicitTLSAndARefusal(t *testing.T) {
	t.Parallel()
	mp, roots := startMailpit(t, true, "toolgate", "smtp-password-2")
	env, engine, m := ntEnv(t, fmt.Sprintf(`default:
  notify:
    - {type: email, url: "smtps://%s", from: toolgate@example.com, to: [carol@example.com], username: toolgate, secret: smtp-password-2}
    - {type: email, url: "smtps://%s", from: toolgate@example.com, to: [dave@example.com], username: toolgate, secret: wrong-password}
`, mp.smtp, mp.smtp))
	ntStart(t, env, engine, nil, append(ntFast(5), worker.WithSMTPTLSConfig(&tls.Config{RootCAs: roots}))...)
	ntSubmit(t, m, machine.Call{})

	got := mp.messages(t, 1)
	assert.Equal(t, "carol@example.com", got[0].To[0].Address)
	cons, err := env.JS.OrderedConsumer(t.Context(), wire.DeadLetterStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.DeadLetterSubject(worker.NotifierDurable)},
	})
	require.NoError(t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(ntWait))
	require.NoError(t, err, "the refused delivery is dead-lettered")
	h := msg.Headers()
	assert.Equal(t, "1", h.Get(consumer.HeaderDeadDeliveries), "at the first attempt")
	assert.Contains(t, h.Get(consumer.HeaderDeadError), "SMTP "+mp.smtp+": 535")
	assert.NotContains(t, h.Get(consumer.HeaderDeadError), "wrong-password")
	assert.Equal(t, "smtps://"+mp.smtp+"/…", h.Get(worker.HeaderChannelHost))
	assert.Len(t, mp.messages(t, 1), 1, "nothing reached dave")
}
