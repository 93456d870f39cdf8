package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// OIDC is single sign-on at an OpenID provider (docs/approvers.md): the
// inbox signs people in with the authorization code flow and PKCE, and
// the API takes the provider's tokens as bearer tokens. The zero OIDC is
// off.
type OIDC struct {
	// Issuer is the provider's issuer URL, from which everything else
	// is discovered (its /.well-known/openid-configuration).
	Issuer       string
	ClientID     string
	ClientSecret string // "" for a public client, PKCE alone
	// Audience is what a bearer token's aud must name (default: ClientID).
	Audience string
	// RedirectURL is where the provider sends people back to,
	// …/auth/callback ("": the address the browser used, over https when
	// the request came over TLS).
	RedirectURL string
	// Scopes asked for at sign-in (default openid, profile, email).
	Scopes []string
	// UserClaim names the claim that is a person's toolgate name, the one
	// the policy's approver lists name them by (default email; an email
	// the provider says is not verified is refused).
	UserClaim string
	// RolesClaim names the claim that lists a person's groups or roles,
	// a path through nested objects with dots: realm_access.roles
	// (default groups).
	RolesClaim string
	// Roles maps the values of RolesClaim to toolgate's roles. A person
	// with no value mapped signs in with no role, and may read nothing.
	Roles RoleMap
	// GroupsClaim names the claim that lists a person's groups, which a
	// policy's group:NAME entries admit (default: RolesClaim's).
	GroupsClaim string
	// SessionKey seals the inbox's session cookies: every process that
	// serves the inbox must have the same, so a session one made is good
	// at all. At least 32 bytes.
	SessionKey string
	// SessionTTL is how long a session lasts before its person signs in
	// again (default 8h); their roles are read at sign-in.
	SessionTTL time.Duration
	// HTTPClient reaches the provider (nil: a client with a 10s timeout).
	HTTPClient *http.Client
}

// Enabled reports whether single sign-on is configured.
func (o *OIDC) Enabled() bool { return o != nil && o.Issuer != "" }

// Check says what is wrong with the configuration, naming serve's flag.
func (o *OIDC) Check() error {
	if !o.Enabled() {
		return nil
	}
	if u, err := url.Parse(o.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("--oidc-issuer %q: want the provider's issuer URL, https://…", o.Issuer)
	}
	if o.ClientID == "" {
		return errors.New("--oidc-client-id: required with --oidc-issuer: the client toolgate is registered as at the provider")
	}
	if o.RedirectURL != "" {
		if u, err := url.Parse(o.RedirectURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != callbackPath {
			return fmt.Errorf("--oidc-redirect-url %q: want the inbox's address and %s, such as https://toolgate.example.com%s", o.RedirectURL, callbackPath, callbackPath)
		}
	}
	if len(o.SessionKey) < 32 {
		return fmt.Errorf("--oidc-session-key: required with --oidc-issuer, at least 32 characters (got %d), the same in every serve process: it seals the inbox's sessions", len(o.SessionKey))
	}
	if o.SessionTTL < 0 {
		return fmt.Errorf("--oidc-session-ttl: must be positive, got %s", o.SessionTTL)
	}
	for _, c := range []struct{ flag, claim string }{{"--oidc-user-claim", o.UserClaim}, {"--oidc-roles-claim", o.RolesClaim}, {"--oidc-groups-claim", o.GroupsClaim}} {
		for part := range strings.SplitSeq(c.claim, ".") {
			if c.claim != "" && part == "" {
				return fmt.Errorf("%s %q: want a claim's name, or a path of names with dots (realm_access.roles)", c.flag, c.claim)
			}
		}
	}
	return nil
}

// withDefaults is o with its defaults filled in.
func (o OIDC) withDefaults() OIDC {
	if o.Audience == "" {
		o.Audience = o.ClientID
	}
	if len(o.Scopes) == 0 {
		o.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	} else if !slices.Contains(o.Scopes, oidc.ScopeOpenID) {
		o.Scopes = append([]string{oidc.ScopeOpenID}, o.Scopes...)
	}
	if o.UserClaim == "" {
		o.UserClaim = "email"
	}
	if o.RolesClaim == "" {
		o.RolesClaim = "groups"
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = o.RolesClaim
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = 8 * time.Hour
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return o
}

// RoleMap maps a claim's values (groups, roles) to toolgate's roles. As
// a flag it reads GROUP=ROLE[,ROLE…] entries separated by ';':
// payments-leads=approver;sre=admin.
type RoleMap map[string][]Role

// String implements flag.Value.
func (m RoleMap) String() string {
	var entries []string
	for g, roles := range m {
		rs := make([]string, len(roles))
		for i, r := range roles {
			rs[i] = string(r)
		}
		entries = append(entries, g+"="+strings.Join(rs, ","))
	}
	slices.Sort(entries)
	return strings.Join(entries, ";")
}

// Set implements flag.Value: the entries of s join those set before.
func (m *RoleMap) Set(s string) error {
	if *m == nil {
		*m = RoleMap{}
	}
	for entry := range strings.SplitSeq(s, ";") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		group, roles, ok := strings.Cut(entry, "=")
		group = strings.TrimSpace(group)
		if !ok || group == "" || strings.TrimSpace(roles) == "" {
			return fmt.Errorf("%q: want GROUP=ROLE[,ROLE…], such as payments-leads=approver", entry)
		}
		for r := range strings.SplitSeq(roles, ",") {
			r = strings.TrimSpace(r)
			if !slices.Contains(wire.Roles, Role(r)) || Role(r) == RoleAgent || Role(r) == RoleExecutor {
				return fmt.Errorf("%q: unknown role %q for a person: want approver, viewer or admin", entry, r)
			}
			if !slices.Contains((*m)[group], Role(r)) {
				(*m)[group] = append((*m)[group], Role(r))
			}
		}
	}
	return nil
}

// The bounds of what a provider's token may say: a token over them is
// refused, never cut short (a list of groups cut short might drop the
// one that grants a role, or keep one that should not).
const (
	maxBearerToken = 16 << 10 // a JWT, before its signature is checked
	maxClaimString = 256      // sub, name, email, a group's name
	maxClaimValues = 200      // values of the roles claim
	maxIssuer      = 512
)

// userName is what a toolgate name may be: what the inbox's name prompt
// takes, and a credential's name.
var userName = regexp.MustCompile(`^[\w.@+-]{1,64}$`)

// errUnavailable refuses a request the provider was needed for and did
// not answer: never let through, and not the caller's fault.
func errUnavailable(issuer string, err error) error {
	return httpErr(http.StatusServiceUnavailable, "unavailable",
		fmt.Sprintf("the OpenID provider %s cannot be reached to check the sign-in (%v): try again shortly", issuer, err))
}

func errUnauthorized(format string, args ...any) error {
	return httpErr(http.StatusUnauthorized, "unauthorized", fmt.Sprintf(format, args...))
}

// clockSkew is how far a token's expiry and not-before may be off the
// clock of this machine.
const clockSkew = 30 * time.Second

// oidcAuth signs people in at the provider and checks its tokens. The
// provider is discovered at the first request that needs it, and again
// at the next one while that fails: a toolgate started while its
// provider is away serves its token users meanwhile, and refuses the
// provider's with 503.
type oidcAuth struct {
	cfg      OIDC
	sessions *sealer

	mu       sync.Mutex
	provider *oidc.Provider
	// id checks the ID tokens of sign-ins (aud: the client); bearer, the
	// tokens the API is given (aud: Audience). Both check the
	// signature against the provider's published keys, which go-oidc
	// fetches again when a token names a key it has not seen: a rotated
	// key is taken without a restart.
	id, bearer *oidc.IDTokenVerifier
}

func newOIDCAuth(cfg OIDC) (*oidcAuth, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &oidcAuth{cfg: cfg, sessions: newSealer(cfg.SessionKey)}, nil
}

// discover returns the provider and its verifiers, discovering it first
// if need be.
func (a *oidcAuth) discover(ctx context.Context) (*oidc.Provider, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.provider != nil {
		return a.provider, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, a.cfg.HTTPClient), a.cfg.Issuer)
	if err != nil {
		return nil, errUnavailable(a.cfg.Issuer, err)
	}
	// Expiry is checked a moment late (Now, clockSkew behind), not-before
	// in claims below with the same tolerance.
	now := func() time.Time { return time.Now().Add(-clockSkew) }
	a.id = p.Verifier(&oidc.Config{ClientID: a.cfg.ClientID, Now: now})
	a.bearer = p.Verifier(&oidc.Config{ClientID: a.cfg.Audience, Now: now})
	a.provider = p
	return p, nil
}

func (a *oidcAuth) verifier(ctx context.Context, bearer bool) (*oidc.IDTokenVerifier, error) {
	if _, err := a.discover(ctx); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if bearer {
		return a.bearer, nil
	}
	return a.id, nil
}

// verify checks a token the provider signed and returns the user it
// names: 401 for a token that is not good, 503 when the provider's keys
// cannot be had to tell.
func (a *oidcAuth) verify(ctx context.Context, raw string, bearer bool) (User, *oidc.IDToken, error) {
	if len(raw) > maxBearerToken {
		return User{}, nil, errUnauthorized("the token is %d bytes, over the %d a token may be", len(raw), maxBearerToken)
	}
	v, err := a.verifier(ctx, bearer)
	if err != nil {
		return User{}, nil, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		// go-oidc fetches the provider's keys when a token names one it
		// has not seen, and says "fetching keys" when that failed: the
		// token may be good, and nobody can tell now.
		if strings.Contains(err.Error(), "fetching keys") {
			return User{}, nil, errUnavailable(a.cfg.Issuer, err)
		}
		return User{}, nil, errUnauthorized("the token is not accepted: %v", err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return User{}, nil, errUnauthorized("the token's claims: %v", err)
	}
	if nbf, ok := claims["nbf"].(float64); ok && time.Unix(int64(nbf), 0).After(time.Now().Add(clockSkew)) {
		return User{}, nil, errUnauthorized("the token is not valid before %s", time.Unix(int64(nbf), 0).UTC().Format(time.RFC3339))
	}
	u, err := a.user(tok.Issuer, tok.Subject, claims)
	if err != nil {
		return User{}, nil, errUnauthorized("the token: %v", err)
	}
	return u, tok, nil
}

// user is the toolgate user a verified token's claims name.
func (a *oidcAuth) user(issuer, subject string, claims map[string]any) (User, error) {
	if len(issuer) > maxIssuer {
		return User{}, fmt.Errorf("iss: at most %d bytes", maxIssuer)
	}
	if subject == "" || len(subject) > maxClaimString {
		return User{}, fmt.Errorf("sub: 1 to %d bytes, got %d", maxClaimString, len(subject))
	}
	id := &machine.Identity{Issuer: issuer, Subject: subject}
	for _, c := range []struct {
		claim string
		into  *string
	}{{"name", &id.Name}, {"email", &id.Email}} {
		if s, ok := claims[c.claim].(string); ok {
			if len(s) > maxClaimString {
				return User{}, fmt.Errorf("%s: at most %d bytes, got %d", c.claim, maxClaimString, len(s))
			}
			*c.into = s
		}
	}
	name, ok := claimAt(claims, a.cfg.UserClaim).(string)
	if !ok || !userName.MatchString(name) {
		return User{}, fmt.Errorf("%s (--oidc-user-claim) must be a name of 1 to 64 letters, digits and . _ @ + -, got %v", a.cfg.UserClaim, claimAt(claims, a.cfg.UserClaim))
	}
	if a.cfg.UserClaim == "email" {
		if verified, ok := claims["email_verified"].(bool); ok && !verified {
			return User{}, fmt.Errorf("email %s: the provider has not verified it, and a name taken from an email must be", name)
		}
	}
	values, err := claimStrings(claimAt(claims, a.cfg.RolesClaim))
	if err != nil {
		return User{}, fmt.Errorf("%s (--oidc-roles-claim): %w", a.cfg.RolesClaim, err)
	}
	u := User{Name: name, Identity: id, Groups: values}
	for _, v := range values {
		for _, r := range a.cfg.Roles[v] {
			if !slices.Contains(u.Roles, r) {
				u.Roles = append(u.Roles, r)
			}
		}
	}
	if a.cfg.GroupsClaim != a.cfg.RolesClaim {
		if u.Groups, err = claimStrings(claimAt(claims, a.cfg.GroupsClaim)); err != nil {
			return User{}, fmt.Errorf("%s (--oidc-groups-claim): %w", a.cfg.GroupsClaim, err)
		}
	}
	return u, nil
}

// claimAt is the claim at path: names through nested objects, with dots.
func claimAt(claims map[string]any, path string) any {
	var v any = claims
	for name := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[name]
	}
	return v
}

// claimStrings reads a claim that lists names: an array of strings, or
// one string; absent is none.
func claimStrings(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return claimStrings([]any{v})
	case []any:
		if len(v) > maxClaimValues {
			return nil, fmt.Errorf("at most %d values, got %d", maxClaimValues, len(v))
		}
		out := make([]string, 0, len(v))
		for _, x := range v {
			s, ok := x.(string)
			if !ok || len(s) > maxClaimString {
				return nil, fmt.Errorf("want names of at most %d bytes, got %v", maxClaimString, x)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a list of names, got %T", v)
}

// oauth2Config is the client's configuration at the provider, sending
// people back to redirect.
func (a *oidcAuth) oauth2Config(p *oidc.Provider, redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID: a.cfg.ClientID, ClientSecret: a.cfg.ClientSecret,
		Endpoint: p.Endpoint(), RedirectURL: redirect, Scopes: a.cfg.Scopes,
	}
}
