package oidctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The provider's storage: what op.Storage asks of it for the
// authorization code flow, in memory. What the flow never reaches
// (refresh tokens, introspection, JWT profile grants) refuses.

var _ op.Storage = (*Provider)(nil)

var errUnsupported = errors.New("oidctest: not supported")

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// authRequest is a sign-in under way: op.AuthRequest.
type authRequest struct {
	id, clientID, redirect, state, nonce string
	scopes                               []string
	responseType                         oidc.ResponseType
	challenge                            *oidc.CodeChallenge
	subject                              string
	done                                 bool
	authTime                             time.Time
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return []string{a.clientID} }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirect }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return "" }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

func (p *Provider) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	req := &authRequest{id: randomID(), clientID: r.ClientID, redirect: r.RedirectURI, state: r.State, nonce: r.Nonce,
		scopes: r.Scopes, responseType: r.ResponseType}
	if r.CodeChallenge != "" {
		req.challenge = &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests[req.id] = req
	return req, nil
}

func (p *Provider) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.requests[id]; ok {
		return r, nil
	}
	return nil, errors.New("oidctest: no such auth request")
}

func (p *Provider) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	p.mu.Lock()
	id, ok := p.codes[code]
	p.mu.Unlock()
	if !ok {
		return nil, errors.New("oidctest: code invalid or used")
	}
	return p.AuthRequestByID(ctx, id)
}

func (p *Provider) SaveAuthCode(_ context.Context, id, code string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.codes[code] = id
	return nil
}

// DeleteAuthRequest is called once the code has been exchanged: the
// code is good once.
func (p *Provider) DeleteAuthRequest(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.requests, id)
	for code, rid := range p.codes {
		if rid == id {
			delete(p.codes, code)
		}
	}
	return nil
}

func (p *Provider) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	return randomID(), time.Now().Add(5 * time.Minute), nil
}

func (p *Provider) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errUnsupported
}

func (p *Provider) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, errUnsupported
}

func (p *Provider) TerminateSession(context.Context, string, string) error { return nil }

func (p *Provider) RevokeToken(context.Context, string, string, string) *oidc.Error { return nil }

func (p *Provider) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (p *Provider) SigningKey(context.Context) (op.SigningKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[len(p.keys)-1], nil
}

func (p *Provider) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (p *Provider) KeySet(context.Context) ([]op.Key, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]op.Key, len(p.keys))
	for i, k := range p.keys {
		keys[i] = publicKey{k}
	}
	return keys, nil
}

func (p *Provider) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[id]; ok {
		return c, nil
	}
	return nil, errors.New("oidctest: no such client")
}

func (p *Provider) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[id]; ok && c.secret == secret {
		return nil
	}
	return errors.New("oidctest: wrong client or secret")
}

func (p *Provider) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the claims of an ID token, which the
// clients assert there (IDTokenUserinfoClaimsAssertion).
func (p *Provider) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, r op.IDTokenRequest, _ []string) error {
	return p.userinfo(info, r.GetSubject())
}

func (p *Provider) userinfo(info *oidc.UserInfo, subject string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.userBySubject(subject)
	if u == nil {
		return errors.New("oidctest: no such user")
	}
	info.Subject, info.Name, info.PreferredUsername = u.Subject, u.Name, u.Username
	info.Email, info.EmailVerified = u.Email, true
	info.AppendClaims("groups", u.Groups)
	for k, v := range u.Claims {
		info.AppendClaims(k, v)
	}
	return nil
}

func (p *Provider) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errUnsupported
}

func (p *Provider) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errUnsupported
}

func (p *Provider) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (p *Provider) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errUnsupported
}

func (p *Provider) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errUnsupported
}

func (p *Provider) Health(context.Context) error { return nil }
