package httpapi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/toolgate/toolgate/machine"
)

// The inbox's sign-in at the OpenID provider: /auth/login sends the
// browser to the provider with a PKCE challenge, /auth/callback takes the
// code back, exchanges it and checks the ID token, and sets the session
// cookie; /auth/logout ends the session. The session is the cookie: its
// user, roles and identity, sealed (encrypted and authenticated) with the
// key every serve process shares, so any process reads a session another
// made, and nothing a caller writes names anyone.

const (
	loginPath    = "/auth/login"
	callbackPath = "/auth/callback"
	logoutPath   = "/auth/logout"
	infoPath     = "/auth/info"

	sessionCookie = "toolgate_session"
	// signinCookie holds a sign-in under way: its state, nonce and PKCE
	// verifier, for the callback to check the provider's answer against.
	signinCookie = "toolgate_signin"
	signinTTL    = 10 * time.Minute
	// maxCookie bounds a cookie toolgate reads or writes: browsers keep
	// 4096 bytes of one, name and attributes included.
	maxCookie = 3800
)

// sealer seals and opens cookies with AES-256-GCM, under a key derived
// from the configured one for each cookie name, so that one cookie's
// value is never taken for another's.
type sealer struct{ key string }

func newSealer(key string) *sealer { return &sealer{key: key} }

func (s *sealer) aead(name string) cipher.AEAD {
	k := sha256.Sum256([]byte("toolgate cookie " + name + "\x00" + s.key))
	block, _ := aes.NewCipher(k[:])
	aead, _ := cipher.NewGCM(block)
	return aead
}

func (s *sealer) seal(name string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	aead := s.aead(name)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, nil))
	if len(out) > maxCookie {
		return "", fmt.Errorf("the sign-in is %d bytes sealed, over the %d a cookie may hold", len(out), maxCookie)
	}
	return out, nil
}

func (s *sealer) open(name, value string, v any) error {
	if len(value) > maxCookie {
		return errors.New("too long")
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	aead := s.aead(name)
	if err != nil || len(raw) < aead.NonceSize() {
		return errors.New("malformed")
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], nil)
	if err != nil {
		return errors.New("not sealed by this toolgate's key")
	}
	return json.Unmarshal(plain, v)
}

// session is what the session cookie holds.
type session struct {
	Name     string           `json:"n"`
	Roles    []Role           `json:"r,omitempty"`
	Groups   []string         `json:"g,omitempty"`
	Identity machine.Identity `json:"i"`
	Expires  int64            `json:"e"` // Unix seconds
}

// signin is what the sign-in cookie holds while the browser is at the
// provider.
type signin struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Return   string `json:"r"`
	Expires  int64  `json:"e"`
}

// sessionUser is the user of the request's session cookie, if it has a
// good one.
func (a *oidcAuth) sessionUser(r *http.Request) (User, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return User{}, false
	}
	var s session
	if err := a.sessions.open(sessionCookie, c.Value, &s); err != nil || time.Now().Unix() >= s.Expires {
		return User{}, false
	}
	id := s.Identity
	return User{Name: s.Name, Roles: s.Roles, Groups: s.Groups, Identity: &id}, true
}

// secure says whether cookies for r are sent over TLS only: when the
// request came over TLS, or the redirect URL says the inbox is reached
// over https (through a proxy that ends TLS).
func (a *oidcAuth) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(a.cfg.RedirectURL, "https://")
}

func (a *oidcAuth) setCookie(w http.ResponseWriter, r *http.Request, name, path, value string, expires time.Time) {
	c := &http.Cookie{Name: name, Value: value, Path: path, HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
		c.MaxAge = int(time.Until(expires).Seconds())
	}
	http.SetCookie(w, c)
}

// redirectURL is where the provider sends the browser back to.
func (a *oidcAuth) redirectURL(r *http.Request) string {
	if a.cfg.RedirectURL != "" {
		return a.cfg.RedirectURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + callbackPath
}

// returnPath is where a sign-in ends: a path of this server's, never
// another site ("//evil.example" is one).
func returnPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || len(p) > 1024 {
		return "/"
	}
	return p
}

func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// login sends the browser to the provider.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	a := s.oidc
	p, err := a.discover(r.Context())
	if err != nil {
		s.signinFailed(w, err)
		return
	}
	in := signin{State: randomString(), Nonce: randomString(), Verifier: oauth2.GenerateVerifier(),
		Return: returnPath(r.URL.Query().Get("return")), Expires: time.Now().Add(signinTTL).Unix()}
	sealed, err := a.sessions.seal(signinCookie, in)
	if err != nil {
		s.signinFailed(w, err)
		return
	}
	a.setCookie(w, r, signinCookie, "/auth/", sealed, time.Unix(in.Expires, 0))
	to := a.oauth2Config(p, a.redirectURL(r)).AuthCodeURL(in.State, oidcNonce(in.Nonce), oauth2.S256ChallengeOption(in.Verifier))
	http.Redirect(w, r, to, http.StatusFound)
}

func oidcNonce(n string) oauth2.AuthCodeOption { return oauth2.SetAuthURLParam("nonce", n) }

// callback takes the provider's answer: the code, exchanged with the
// PKCE verifier, for an ID token whose signature, issuer, audience,
// expiry and nonce are checked; then the session.
func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	a := s.oidc
	fail := func(err error) { s.signinFailed(w, err) }
	var in signin
	c, err := r.Cookie(signinCookie)
	if err != nil || a.sessions.open(signinCookie, c.Value, &in) != nil || time.Now().Unix() >= in.Expires {
		fail(errUnauthorized("no sign-in under way in this browser, or it took over %s: start again", signinTTL))
		return
	}
	a.setCookie(w, r, signinCookie, "/auth/", "", time.Time{})
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		fail(errUnauthorized("the provider refused the sign-in: %s %s", boundedText(e), boundedText(q.Get("error_description"))))
		return
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(in.State)) != 1 {
		fail(errUnauthorized("the provider's answer is not for the sign-in this browser started: start again"))
		return
	}
	p, err := a.discover(r.Context())
	if err != nil {
		fail(err)
		return
	}
	tok, err := a.oauth2Config(p, a.redirectURL(r)).Exchange(oidc.ClientContext(r.Context(), a.cfg.HTTPClient), q.Get("code"), oauth2.VerifierOption(in.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			fail(errUnauthorized("the provider refused the code: %v", err))
		} else {
			fail(errUnavailable(a.cfg.Issuer, err))
		}
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		fail(errUnauthorized("the provider sent no ID token: is the scope openid asked for?"))
		return
	}
	u, idt, err := a.verify(r.Context(), raw, false)
	if err != nil {
		fail(err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(in.Nonce)) != 1 {
		fail(errUnauthorized("the ID token's nonce is not this sign-in's"))
		return
	}
	sess := session{Name: u.Name, Roles: u.Roles, Groups: u.Groups, Identity: *u.Identity, Expires: time.Now().Add(a.cfg.SessionTTL).Unix()}
	sealed, err := a.sessions.seal(sessionCookie, sess)
	if err != nil && len(sess.Groups) > 0 {
		// Most of such a session is the person's groups (a provider may
		// send hundreds). Without them the person signs in still, and
		// decides only what names them: fewer calls, never more.
		s.logger().Warn("signed in without their groups: they do not fit the session cookie; have the provider send only the application's",
			"user", u.Name, "groups", len(sess.Groups), "claim", a.cfg.GroupsClaim, "err", err)
		sess.Groups = nil
		sealed, err = a.sessions.seal(sessionCookie, sess)
	}
	if err != nil {
		fail(errUnauthorized("%v", err))
		return
	}
	a.setCookie(w, r, sessionCookie, "/", sealed, time.Unix(sess.Expires, 0))
	s.logger().Info("signed in", "user", u.Name, "issuer", u.Identity.Issuer, "subject", u.Identity.Subject, "roles", u.Roles, "groups", u.Groups)
	http.Redirect(w, r, in.Return, http.StatusFound)
}

// logout ends the session this browser holds. The provider's own
// session is the provider's: signing in again may not ask for a password.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin == "" || !sameOrigin(origin, r.Host) {
		writeError(w, s.cfg.Log, httpErr(http.StatusForbidden, "forbidden", "sign out from the inbox's own page"))
		return
	}
	s.oidc.setCookie(w, r, sessionCookie, "/", "", time.Time{})
	w.WriteHeader(http.StatusNoContent)
}

// SignInInfo is what GET /auth/info tells the inbox of how people sign in.
type SignInInfo struct {
	// SingleSignOn says people sign in at an OpenID provider, Issuer,
	// through /auth/login.
	SingleSignOn bool   `json:"singleSignOn"`
	Issuer       string `json:"issuer,omitempty"`
}

func (s *Server) signInInfo(w http.ResponseWriter, _ *http.Request) {
	info := SignInInfo{}
	if s.oidc != nil {
		info = SignInInfo{SingleSignOn: true, Issuer: s.oidc.cfg.Issuer}
	}
	writeJSON(w, http.StatusOK, info)
}

var signinPage = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>toolgate: sign-in failed</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="stylesheet" href="/style.css"></head>
<body><main><section class="gate"><div class="gate-card"><h1>Sign-in failed</h1>
<p id="signin-error">{{.}}</p><p><a class="btn btn-primary" href="/">Back to the inbox</a></p></div></section></main></body></html>
`))

// signinFailed answers a sign-in that did not complete with a page that
// says why, with the status the error maps to.
func (s *Server) signinFailed(w http.ResponseWriter, err error) {
	status := http.StatusUnauthorized
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	}
	s.logger().Warn("sign-in failed", "err", err)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'")
	w.WriteHeader(status)
	_ = signinPage.Execute(w, err.Error())
}

// boundedText is a provider's word as toolgate repeats it: 200 bytes at
// most.
func boundedText(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func (s *Server) logger() *slog.Logger {
	if s.cfg.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.cfg.Log
}
