package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/server"
)

// serveConfig is what serve's flags fill: the server's Config, and what
// is the process's (its memory limit).
type serveConfig struct {
	server.Config
	memoryLimit memoryLimit
}

// newServeFlags returns serve's flags, whose defaults are
// server.DefaultConfig's, and the config they fill.
func newServeFlags(stderr io.Writer) (*flag.FlagSet, *serveConfig) {
	cfg := serveConfig{Config: server.DefaultConfig(), memoryLimit: defaultMemoryLimit}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Data, "data", cfg.Data, "directory the embedded NATS server stores JetStream data in")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "HOST:PORT the embedded NATS server listens on for clients")
	fs.StringVar(&cfg.Conn.URLs, "nats", "", "NATS server URLs (comma-separated) to use instead of the embedded server")
	fs.StringVar(&cfg.Conn.User, "nats-user", "", "NATS user (with --nats-password)")
	fs.StringVar(&cfg.Conn.Password, "nats-password", "", "NATS password")
	fs.StringVar(&cfg.Conn.Token, "nats-token", "", "NATS token")
	fs.StringVar(&cfg.Conn.CredsFile, "nats-creds", "", "NATS credentials file")
	tlsFlags(fs, &cfg.Conn)
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas of the bucket and streams (3 on a cluster)")
	fs.DurationVar(&cfg.EventsMaxAge, "events-max-age", cfg.EventsMaxAge, "how long TOOL_EVENTS keeps events (0: for ever)")
	fs.DurationVar(&cfg.RelayAckWait, "relay-ack-wait", cfg.RelayAckWait, "how long a revision handed to a relay that died waits before another relay takes it")
	fs.TextVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.Var(&cfg.Roles, "roles", "roles this process runs: all, or a comma-separated list of "+strings.Join(server.RoleNames(), ","))
	fs.StringVar(&cfg.PolicyFile, "policy", "", "policy document (YAML or JSON) to put in force at start")
	fs.StringVar(&cfg.HTTP, "http", cfg.HTTP, "HOST:PORT of the HTTP API and web inbox (role http)")
	fs.Var(&cfg.AllowedHosts, "allowed-hosts", "Host headers the HTTP API answers, comma-separated: names, addresses, *.domain or * (default: localhost, 127.0.0.1, ::1 and --http's host; * when --http listens on every address)")
	fs.StringVar(&cfg.TokensFile, "tokens", "", "file of HTTP bearer tokens, one per line: TOKEN USER ROLE[,ROLE…] [GROUP[,GROUP…]]")
	fs.StringVar(&cfg.TokensData, "tokens-data", "", "HTTP bearer tokens inline, entries separated by ';'")
	oidcFlags(fs, &cfg.OIDC)
	fs.StringVar(&cfg.Metrics, "metrics", "", "HOST:PORT serving only /metrics, for a process without the http role (none by default)")
	fs.DurationVar(&cfg.Retention, "retention", cfg.Retention, "how long a finished call stays in the tool_calls bucket before the timer moves it, with its history, to the archive (TOOL_ARCHIVE), where it is still read by id and conversation (0: it stays)")
	fs.DurationVar(&cfg.ArchiveMaxAge, "archive-max-age", cfg.ArchiveMaxAge, "how long TOOL_ARCHIVE keeps a finished call (0: for ever)")
	fs.DurationVar(&cfg.OutageLimit, "nats-outage-limit", cfg.OutageLimit, "how long serve reconnects to NATS before it exits non-zero for its supervisor to restart it (0: reconnect for ever); a connection NATS closes for good exits at once")
	fs.StringVar(&cfg.Sync, "sync", cfg.Sync, "when the embedded server's writes reach the disk: interval (every 2 minutes; an acknowledged write survives a killed process) or always (before each is acknowledged; it survives a power cut, at a cost toolgate bench --sync both measures)")
	fs.DurationVar(&cfg.Lease, "executor-lease", cfg.Lease, "how long the executor role's claim on a running call lasts without a heartbeat (a dead executor's calls run again elsewhere after it)")
	fs.Func("tools", "built-in tools the executor role hosts: http, exec (comma-separated; none by default)", func(v string) error {
		cfg.Tools = nil
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				cfg.Tools = append(cfg.Tools, t)
			}
		}
		return nil
	})
	fs.Var(&cfg.memoryLimit, "memory-limit", "soft limit on the Go runtime's memory when GOMEMLIMIT is unset: a percentage of the container's (the cgroup's) memory limit, applied only where there is one, a size (900MiB, 2GiB), or off")
	return fs, &cfg
}

func serve(ctx context.Context, args []string, globals []globalFlag, env lookupEnv, stderr io.Writer) error {
	fs, cfg := newServeFlags(stderr)
	if err := parseFlagsFrom(fs, args, globals, env); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	cfg.memoryLimit.apply(log)
	return (&server.Main{Config: cfg.Config, Log: log, Version: version}).Run(ctx)
}

// oidcFlags are single sign-on's settings (docs/approvers.md).
func oidcFlags(fs *flag.FlagSet, o *httpapi.OIDC) {
	list := func(into *[]string) func(string) error {
		return func(v string) error {
			*into = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
			return nil
		}
	}
	fs.StringVar(&o.Issuer, "oidc-issuer", "", "single sign-on: the OpenID provider's issuer URL; the inbox signs people in there, and the HTTP API takes its tokens as bearer tokens (docs/approvers.md)")
	fs.StringVar(&o.ClientID, "oidc-client-id", "", "single sign-on: the client ID toolgate is registered with at the provider")
	fs.StringVar(&o.ClientSecret, "oidc-client-secret", "", "single sign-on: the client's secret (none for a public client, which PKCE alone protects)")
	fs.StringVar(&o.Audience, "oidc-audience", "", "single sign-on: what a bearer token's aud must name (default: --oidc-client-id)")
	fs.StringVar(&o.RedirectURL, "oidc-redirect-url", "", "single sign-on: the inbox's address and /auth/callback, registered at the provider (default: the address the browser used; give it behind a proxy, https:// keeps the cookies to TLS)")
	fs.Func("oidc-scopes", "single sign-on: the scopes asked for, comma-separated (default openid,profile,email; Dex needs groups too)", list(&o.Scopes))
	fs.StringVar(&o.UserClaim, "oidc-user-claim", "email", "single sign-on: the claim that is a person's toolgate name, the one the policy names approvers by (preferred_username, email, …)")
	fs.StringVar(&o.RolesClaim, "oidc-roles-claim", "groups", "single sign-on: the claim that lists a person's groups or roles, a path through nested claims with dots (realm_access.roles)")
	fs.StringVar(&o.GroupsClaim, "oidc-groups-claim", "", "single sign-on: the claim that lists a person's groups, which the policy's group:NAME entries admit to decide (default: --oidc-roles-claim's); read at sign-in")
	fs.Var(&o.Roles, "oidc-roles", "single sign-on: the claim's values mapped to toolgate roles, GROUP=ROLE[,ROLE…] separated by ';': 'payments-leads=approver;sre=admin'; a person with none signs in and may read nothing")
	fs.StringVar(&o.SessionKey, "oidc-session-key", "", "single sign-on: the key (32 characters or more) that seals the inbox's session cookies, the same in every serve process; from TOOLGATE_OIDC_SESSION_KEY rather than the command line")
	fs.DurationVar(&o.SessionTTL, "oidc-session-ttl", 8*time.Hour, "single sign-on: how long an inbox session lasts; roles are read from the claims at sign-in")
}
