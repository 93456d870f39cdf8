package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// An email channel's message: one SMTP transaction to all its addresses,
// a plain-text part and an HTML part saying the same (the call's
// description, caller, conversation, team, estimated cost and deadline;
// for a call still waiting, links to approve and reject it and to open it
// in the inbox). Like every notification it carries the event's entry
// as the relay published it, masked: no argument is in it, and the
// description the policy's describe template wrote is of the masked
// arguments.

// WithSMTPTLSConfig sets the TLS configuration email channels reach their
// SMTP servers with (default: the system's roots, the server's name
// checked). The server name is set per server.
func WithSMTPTLSConfig(c *tls.Config) NotifierOption {
	return func(n *Notifier) { n.smtpTLS = c }
}

// sendEmail sends s to an email channel (resolved), with the one-time
// decision links l if any. A refusal the server says is permanent (5xx)
// is not retried; anything else is, a dropped connection included.
func (n *Notifier) sendEmail(ctx context.Context, ch policy.Channel, s summary, l *links, id string) error {
	addr, implicitTLS, err := ch.SMTPAddress()
	if err != nil {
		return &sendError{msg: "email url: " + err.Error(), permanent: true}
	}
	from, err := mail.ParseAddress(ch.From)
	if err != nil {
		return &sendError{msg: "email from: " + err.Error(), permanent: true}
	}
	to := make([]*mail.Address, len(ch.To))
	for i, a := range ch.To {
		if to[i], err = mail.ParseAddress(a); err != nil {
			return &sendError{msg: "email to: " + err.Error(), permanent: true}
		}
	}
	msg, err := emailMessage(from, to, s, l, n.now(), id)
	if err != nil {
		return &sendError{msg: err.Error(), permanent: true}
	}
	if err := n.smtpSend(ctx, ch, addr, implicitTLS, from, to, msg); err != nil {
		e := &sendError{msg: fmt.Sprintf("SMTP %s: %v", addr, err)}
		var te *textproto.Error
		if errors.As(err, &te) && te.Code >= 500 {
			e.permanent = true // refused as sent: an address, the credentials, the size
		}
		return e
	}
	return nil
}

// smtpSend makes one SMTP transaction: TLS (at once, or by STARTTLS,
// which the server must offer: a password and the call never cross in
// the clear), AUTH PLAIN when the channel has a username, the message to
// every address.
func (n *Notifier) smtpSend(ctx context.Context, ch policy.Channel, addr string, implicitTLS bool, from *mail.Address, to []*mail.Address, msg []byte) error {
	host, _, _ := net.SplitHostPort(addr)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if n.smtpTLS != nil {
		cfg = n.smtpTLS.Clone()
	}
	cfg.ServerName = host
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	// net/smtp takes no context: the attempt's deadline bounds the
	// connection, and ending ctx ends it.
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if implicitTLS {
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		conn = tc
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return err
	}
	defer c.Close()
	if !implicitTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return &textproto.Error{Code: 554, Msg: "the server does not offer STARTTLS (smtp:// needs it; smtps:// is TLS from the start)"}
		}
		if err := c.StartTLS(cfg); err != nil {
			return err
		}
	}
	if ch.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", ch.Username, ch.Secret, host)); err != nil {
			return err
		}
	}
	if err := c.Mail(from.Address); err != nil {
		return err
	}
	for _, a := range to {
		if err := c.Rcpt(a.Address); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// emailMessage is the message of s, RFC 5322 with CRLF line ends: its
// headers (the addresses' names RFC 2047 encoded) and a
// multipart/alternative body of a text and an HTML part, each
// quoted-printable. id, the event's, makes its Message-ID.
func emailMessage(from *mail.Address, to []*mail.Address, s summary, l *links, now time.Time, id string) ([]byte, error) {
	v := emailView{summary: s, Approve: s.approve, Reject: s.reject, Open: s.link}
	if l != nil {
		v.Approve, v.Reject, v.OneTime = l.approve, l.reject, true
	}
	if !s.waiting() {
		v.Approve, v.Reject = "", ""
	}
	var text, html bytes.Buffer
	if err := emailText.Execute(&text, v); err != nil {
		return nil, err
	}
	if err := emailHTML.Execute(&html, v); err != nil {
		return nil, err
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, part := range []struct {
		typ  string
		data []byte
	}{{"text/plain; charset=utf-8", text.Bytes()}, {"text/html; charset=utf-8", html.Bytes()}} {
		w, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {part.typ}, "Content-Transfer-Encoding": {"quoted-printable"}})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(w)
		if _, err := qp.Write(crlf(part.data)); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(id))
	var msg bytes.Buffer
	header := func(k, v string) { msg.WriteString(k + ": " + v + "\r\n") }
	header("From", from.String())
	names := make([]string, len(to))
	for i, a := range to {
		names[i] = a.String()
	}
	header("To", strings.Join(names, ", "))
	header("Subject", mime.QEncoding.Encode("utf-8", oneLine(clip(s.headline+": "+s.description, 200))))
	header("Date", now.UTC().Format(time.RFC1123Z))
	header("Message-ID", "<"+hex.EncodeToString(sum[:12])+"@toolgate>")
	header("MIME-Version", "1.0")
	header("Content-Type", `multipart/alternative; boundary="`+mw.Boundary()+`"`)
	header("X-Toolgate-Pending-Id", mime.QEncoding.Encode("utf-8", oneLine(s.pendingID)))
	msg.WriteString("\r\n")
	msg.Write(body.Bytes())
	return msg.Bytes(), nil
}

// crlf ends every line of b with CRLF, as a message's lines must.
func crlf(b []byte) []byte {
	return []byte(strings.ReplaceAll(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n", "\r\n"))
}

// emailView is what the templates show: the summary and its links.
type emailView struct {
	summary
	Approve, Reject, Open string
	// OneTime says Approve and Reject are one-time decision links.
	OneTime bool
}

func (v emailView) Headline() string    { return v.headline }
func (v emailView) Description() string { return v.description }
func (v emailView) Reason() string      { return v.reason }
func (v emailView) Waiting() bool       { return v.waiting() }
func (v emailView) Facts() [][2]string {
	f := [][2]string{{"Tool", v.tool}, {"Caller", v.caller}, {"Conversation", v.conversation}}
	if v.team != "" {
		f = append(f, [2]string{"Team", v.team})
	}
	if v.waiting() {
		f = append(f, [2]string{"Estimated cost", v.costText()}, [2]string{"Deadline", v.deadlineText()})
	}
	return f
}

var emailText = texttemplate.Must(texttemplate.New("text").Parse(`{{.Headline}}

{{.Description}}
{{if .Reason}}
Reason: {{.Reason}}
{{end}}
{{range .Facts}}{{index . 0}}: {{index . 1}}
{{end}}{{if .Approve}}
Approve: {{.Approve}}
Reject: {{.Reject}}
{{if .OneTime}}(each link decides once){{end}}
{{end}}{{if .Open}}
Open in the inbox: {{.Open}}
{{end}}`))

var emailHTML = template.Must(template.New("html").Parse(`<!doctype html>
<html><body style="font-family: sans-serif">
<h2>{{.Headline}}</h2>
<p>{{.Description}}</p>
{{if .Reason}}<p>Reason: {{.Reason}}</p>{{end}}
<table>{{range .Facts}}<tr><th align="left">{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
{{if .Approve}}<p><a href="{{.Approve}}">Approve</a> &middot; <a href="{{.Reject}}">Reject</a>{{if .OneTime}} (each link decides once){{end}}</p>{{end}}
{{if .Open}}<p><a href="{{.Open}}">Open in the inbox</a></p>{{end}}
</body></html>
`))
