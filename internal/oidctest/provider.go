// Package oidctest is a real OpenID provider for toolgate's tests,
// started in-process: zitadel/oidc's op package (discovery, the
// authorization endpoint with PKCE, the token endpoint, the published
// keys) over a small in-memory storage, a login page of its own where a
// user types a name and password, and keys it can rotate. Tests only.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// User is a person the provider signs in.
type User struct {
	Subject, Username, Password, Name, Email string
	Groups                                   []string
	// Claims are claims of the user's own beside the standard ones and
	// groups (another list of groups or roles, a nested claim), in the
	// ID tokens and the tokens of Token.
	Claims map[string]any
}

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is its issuer URL (http://127.0.0.1:port).
	Issuer string
	srv    *httptest.Server
	op     *op.Provider

	mu       sync.Mutex
	users    map[string]*User // by username
	clients  map[string]*client
	requests map[string]*authRequest
	codes    map[string]string // code → request id
	keys     []*key            // the signing key last; every one is published
}

// Start starts a provider with users, shut down when the test ends.
func Start(t testing.TB, users ...User) *Provider {
	t.Helper()
	p := &Provider{users: map[string]*User{}, clients: map[string]*client{}, requests: map[string]*authRequest{}, codes: map[string]string{}}
	for _, u := range users {
		p.users[u.Username] = &u
	}
	p.Rotate()
	var handler http.Handler
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(p.srv.Close)
	p.Issuer = p.srv.URL
	var cryptoKey [32]byte
	_, _ = rand.Read(cryptoKey[:])
	provider, err := op.NewProvider(&op.Config{CryptoKey: cryptoKey, CodeMethodS256: true}, p, op.StaticIssuer(p.Issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	p.op = provider
	mux := http.NewServeMux()
	mux.HandleFunc("/login", p.login)
	mux.Handle("/", provider)
	handler = mux
	return p
}

// AddClient registers a confidential client that may send people back
// to redirectURI.
func (p *Provider) AddClient(id, secret, redirectURI string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[id] = &client{id: id, secret: secret, redirect: redirectURI}
}

// Rotate makes a new key the one the provider signs with. The keys
// before it stay published, so tokens they signed still verify.
func (p *Provider) Rotate() {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, &key{id: fmt.Sprintf("key-%d", len(p.keys)+1), priv: k})
}

// Close stops the provider: it answers nothing after.
func (p *Provider) Close() { p.srv.Close() }

// Token is a token the provider signs with its signing key, as it would
// issue one: for the user with username, to audience, valid from
// notBefore until expiry. Claims are added to the standard ones.
func (p *Provider) Token(t testing.TB, username, audience string, notBefore, expiry time.Time) string {
	t.Helper()
	p.mu.Lock()
	u, k := p.users[username], p.keys[len(p.keys)-1]
	p.mu.Unlock()
	if u == nil {
		t.Fatalf("oidctest: no user %s", username)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.id))
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	claims := map[string]any{
		"iss": p.Issuer, "sub": u.Subject, "aud": audience, "iat": time.Now().Unix(),
		"nbf": notBefore.Unix(), "exp": expiry.Unix(),
		"name": u.Name, "email": u.Email, "email_verified": true, "preferred_username": u.Username, "groups": u.Groups,
	}
	maps.Copy(claims, u.Claims)
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	return raw
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><title>Sign in at the test provider</title></head><body>
<h1>Test provider</h1>
<form method="post" action="/login">
<input type="hidden" name="id" value="{{.ID}}">
<label>Username <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<p id="error">{{.Error}}</p>
<button id="submit" type="submit">Sign in</button>
</form></body></html>`))

// login is the provider's own login page: the authorization endpoint
// sends the browser here with the request's id, and a name and password
// that match complete the request.
func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	id := r.FormValue("authRequestID")
	if r.Method == http.MethodPost {
		id = r.FormValue("id")
		if err := p.check(id, r.FormValue("username"), r.FormValue("password")); err != nil {
			_ = loginPage.Execute(w, map[string]string{"ID": id, "Error": err.Error()})
			return
		}
		ctx := op.ContextWithIssuer(r.Context(), p.Issuer)
		http.Redirect(w, r, op.AuthCallbackURL(p.op)(ctx, id), http.StatusFound)
		return
	}
	_ = loginPage.Execute(w, map[string]string{"ID": id})
}

func (p *Provider) check(id, username, password string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	req, u := p.requests[id], p.users[username]
	switch {
	case req == nil:
		return errors.New("no such sign-in")
	case u == nil || u.Password != password:
		return errors.New("wrong username or password")
	}
	req.subject, req.done, req.authTime = u.Subject, true, time.Now()
	return nil
}

func (p *Provider) userBySubject(sub string) *User {
	for _, u := range p.users {
		if u.Subject == sub {
			return u
		}
	}
	return nil
}

// key is one of the provider's keys: op.SigningKey and op.Key.
type key struct {
	id   string
	priv *rsa.PrivateKey
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *key) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *key) ID() string                                  { return k.id }
func (k *key) Use() string                                 { return "sig" }

// Key is the private key to sign with; publicKey the published one.
func (k *key) Key() any { return k.priv }

type publicKey struct{ *key }

func (k publicKey) Key() any { return &k.priv.PublicKey }

// client is a relying party: op.Client.
type client struct{ id, secret, redirect string }

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return []string{c.redirect} }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType         { return []oidc.GrantType{oidc.GrantTypeCode} }
func (c *client) LoginURL(id string) string            { return "/login?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration       { return 5 * time.Minute }
func (c *client) DevMode() bool                        { return true }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
