package chsink

// The query settings that decide what an insert of a replayed batch does.
// ClickHouse's defaults for them moved between releases (26.2 added
// deduplicate_insert, which overrides insert_deduplicate; async_insert is
// on by default in clickhouse-local 26.7), and a user's profile may set
// any of them, so the sink neither assumes their defaults nor trusts them:
// New reads what the server has, sends the value its guarantees need with
// every insert, and refuses a user who may not change them.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

// ErrUnsafeSetting is matched by *SettingError: the server, or the sink's
// user, would let a retried or replayed batch be inserted twice or lost.
var ErrUnsafeSetting = errors.New("chsink: server setting makes a replay unsafe")

// SettingError is returned by New when a setting the sink sends with every
// insert (see ServerSettings.Sent) is unknown to the server, or when one of
// those or deduplicate_insert_select (which a lost-part repair sends as
// 'force_enable') may not be changed by the sink's user: a settings
// profile holds it at another value (a CONST or READONLY constraint, a MIN/MAX or disallowed values that
// exclude the sink's value) or the user is readonly = 1. Nothing was
// written. It is permanent: the server's configuration must change.
type SettingError struct {
	Setting string // e.g. "deduplicate_insert"
	Value   string // its value on the sink's connection; "" if the server does not know it
	Want    string // the value the sink sends
	Reason  string // what a replay would do, and the server's answer
	Fix     string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("chsink: setting %s = %q, the sink needs %q: %s; %s", e.Setting, e.Value, e.Want, e.Reason, e.Fix)
}

func (e *SettingError) Unwrap() error { return ErrUnsafeSetting }

// ServerSettings is what New read of the server: its version and the
// settings that decide the sink's guarantees. Sink.Server returns it and
// New logs it; ReadServerSettings reads it for a connection of one's own
// (an audit, say).
type ServerSettings struct {
	Version string // version()
	// Defaults holds, for each setting the sink sends with its inserts
	// and for deduplicate_insert_select, the value the server gives the
	// sink's connection before the insert's own settings: the server's
	// default, changed by the user's settings profile and by
	// Options.Client.Settings. A setting the server does not know is
	// absent (deduplicate_insert before 26.2).
	Defaults map[string]string
	// Sent holds the settings sent with every insert, besides
	// insert_deduplication_token (the batch's); a replay depends on these
	// values only, whatever Defaults says.
	Sent map[string]string
	// DeduplicationVersion is the server setting
	// insert_deduplication_version (old_separate_hashes,
	// compatible_double_hashes or new_unified_hash: which hash of a block
	// the deduplication log keeps); "" where the server has none.
	DeduplicationVersion string
	// WindowBlocks and WindowSeconds are the table's deduplication window
	// (non_replicated_ or replicated_deduplication_window, and
	// replicated_deduplication_window_seconds, 0 for none), the tightest
	// time bound of its view targets included. Zero from
	// ReadServerSettings, which reads no table.
	WindowBlocks, WindowSeconds int64
}

// insertSetting is a setting the sink sends with every insert, with the
// value its guarantees need and what a replay does under another.
type insertSetting struct {
	name, want string
	since      string // the release that added it; "" for one every supported server has
	risk       string
}

// insertSettings are the settings every insert carries besides its
// insert_deduplication_token. Those with a since are sent only where the
// server knows them: an older server has no such switch to turn off.
var insertSettings = []insertSetting{
	{name: "insert_deduplicate", want: "1",
		risk: "a retried or replayed batch would be inserted again"},
	{name: "deduplicate_insert", want: "enable", since: "26.2",
		risk: "it overrides insert_deduplicate: with disable a retried or replayed batch would be inserted again"},
	{name: "deduplicate_blocks_in_dependent_materialized_views", want: "1",
		risk: "a replayed batch that the table drops as a duplicate would still be counted again by its materialized views"},
	{name: "async_insert", want: "0",
		risk: "an asynchronous insert is buffered with other clients' rows and deduplicated by another log, " +
			"where the sink's checks of parts and of the server's log expect its own block"},
	{name: "update_insert_deduplication_token_in_dependent_materialized_views", want: "1", since: "24.2",
		risk: "before 24.7 a view's blocks keep the insert's token, so a target fed by two views of the table " +
			"drops the second view's block as a duplicate of the first (obsolete and ignored since 24.7)"},
	{name: "materialized_views_ignore_errors", want: "0", since: "23.3",
		risk: "an insert would report success while a materialized view failed, and the view's rows would be lost"},
}

// tokenSetting carries the batch's token; every insert sends it.
const tokenSetting = "insert_deduplication_token"

// selectDedupSetting decides whether an INSERT ... SELECT is
// deduplicated: the sink's inserts send none, the lost-part repair's send
// it (see repair.SelectDedupSetting).
const selectDedupSetting = repair.SelectDedupSetting

// repairSetting is what the lost-part repair's INSERT ... SELECT sends
// besides insertSettings, where the server knows it. New checks that the
// sink's user may set it, as it checks insertSettings: a repair is rare,
// and a refusal there would stop the sink at a batch long after start-up.
var repairSetting = insertSetting{name: selectDedupSetting, want: "force_enable", since: "25.12",
	risk: "it overrides insert_deduplicate and deduplicate_insert for an INSERT ... SELECT: the repair of a view " +
		"target's lost part, repeated after a crash, would insert the view's rows of the batch again"}

// insertSettingsFor returns the settings of an insert with token, sent as
// important: a server that no longer knows one fails the insert instead of
// ignoring the setting.
func insertSettingsFor(sent []ch.Setting, token string) []ch.Setting {
	out := make([]ch.Setting, 0, len(sent)+2) // room for send_logs_level
	out = append(out, ch.Setting{Key: tokenSetting, Value: token, Important: true})
	return append(out, sent...)
}

// checkServer reads the server's version and the settings of
// insertSettings on c, and refuses a server on which an insert cannot
// carry the value the sink needs. It returns the settings to send with
// every insert (without the token). The probes of those values run on
// connections of their own, from dial: a server that refuses a query's
// settings then reads the rest of the query as a protocol error and
// drops the connection.
func checkServer(ctx context.Context, c *ch.Client, dial func(context.Context) (*ch.Client, error)) (ServerSettings, []ch.Setting, error) {
	srv, err := readServerSettings(ctx, c)
	if err != nil {
		return srv, nil, err
	}
	if _, ok := srv.Defaults[tokenSetting]; !ok {
		return srv, nil, &SettingError{Setting: tokenSetting, Want: "the batch's token",
			Reason: "the server (" + srv.Version + ") does not know it, so a replayed batch cannot be told from a new one",
			Fix:    "upgrade ClickHouse (the sink is tested on 26.7; see docs/clickhouse-versions.md)"}
	}
	var sent []ch.Setting
	var checks []insertSetting // what the sink's user must be able to set
	for _, s := range insertSettings {
		if _, ok := srv.Defaults[s.name]; !ok {
			if s.since != "" {
				continue
			}
			return srv, nil, &SettingError{Setting: s.name, Want: s.want,
				Reason: "the server (" + srv.Version + ") does not know it: " + s.risk,
				Fix:    "upgrade ClickHouse (the sink is tested on 26.7; see docs/clickhouse-versions.md)"}
		}
		sent = append(sent, ch.Setting{Key: s.name, Value: s.want, Important: true})
		srv.Sent[s.name] = s.want
		checks = append(checks, s)
	}
	if _, ok := srv.Defaults[repairSetting.name]; ok {
		checks = append(checks, repairSetting)
	}
	// The server checks a query's settings against the user's constraints
	// before it runs the query: a SELECT with the insert's settings fails
	// where the insert would, without writing anything.
	all := make([]ch.Setting, 0, len(checks))
	names := make([]string, 0, len(checks))
	for _, s := range checks {
		all = append(all, ch.Setting{Key: s.name, Value: s.want, Important: true})
		names = append(names, s.name)
	}
	if err := probe(ctx, dial, all); err == nil {
		return srv, sent, nil
	} else if !refused(err) {
		return srv, nil, err
	}
	for _, s := range checks {
		err := probe(ctx, dial, []ch.Setting{{Key: s.name, Value: s.want, Important: true}})
		if err == nil {
			continue
		}
		if !refused(err) {
			return srv, nil, err
		}
		return srv, nil, &SettingError{Setting: s.name, Value: srv.Defaults[s.name], Want: s.want,
			Reason: s.risk + ", and the sink's user may not change it (" + err.Error() + ")",
			Fix: fmt.Sprintf("let the user change it: drop the CONST or READONLY constraint on %s (or the MIN, MAX or "+
				"disallowed values that exclude %s) from its settings profile, with readonly = 0 or 2", s.name, s.want)}
	}
	// Refused together but not one by one: name the set.
	slices.Sort(names)
	return srv, nil, &SettingError{Setting: strings.Join(names, ", "),
		Want:   "the values the sink sends (ServerSettings.Sent, and force_enable for deduplicate_insert_select)",
		Reason: "the server refused them together",
		Fix:    "let the sink's user change these settings"}
}

// refused reports whether err is the server refusing a setting's value: a
// constraint, readonly mode, or a setting it does not know.
func refused(err error) bool {
	return ch.IsErr(err, proto.ErrSettingConstraintViolation, proto.ErrReadonly, proto.ErrUnknownSetting)
}

// probe runs SELECT 1 with settings on a connection of its own.
func probe(ctx context.Context, dial func(context.Context) (*ch.Client, error), settings []ch.Setting) error {
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var col proto.ColUInt8
	return c.Do(ctx, ch.Query{Body: "SELECT 1 AS c", Settings: settings, Result: proto.Results{{Name: "c", Data: &col}}})
}

// readServerSettings reads the version, the values of insertSettings and
// of the token setting on c, and insert_deduplication_version.
func readServerSettings(ctx context.Context, c *ch.Client) (ServerSettings, error) {
	srv := ServerSettings{Defaults: map[string]string{}, Sent: map[string]string{}}
	// deduplicate_insert_select decides the lost-part repair's INSERT ...
	// SELECT, not the sink's inserts: the repair sends it where it exists.
	names := []string{chsql.Quote(tokenSetting), chsql.Quote(selectDedupSetting)}
	for _, s := range insertSettings {
		names = append(names, chsql.Quote(s.name))
	}
	rows, err := chsql.Strings(ctx, c, "SELECT version() AS c0", 1)
	if err == nil && len(rows) > 0 {
		srv.Version = rows[0][0]
		rows, err = chsql.Strings(ctx, c, "SELECT name AS c0, value AS c1 FROM system.settings WHERE name IN ("+
			strings.Join(names, ", ")+")", 2)
	}
	if err != nil {
		return srv, fmt.Errorf("chsink: read the server's settings: %w", err)
	}
	for _, r := range rows {
		srv.Defaults[r[0]] = r[1]
	}
	rows, err = chsql.Strings(ctx, c,
		"SELECT value AS c0 FROM system.server_settings WHERE name = 'insert_deduplication_version'", 1)
	switch {
	case ch.IsErr(err, proto.ErrUnknownTable): // before 23.3: no such table, no such setting
	case err != nil:
		return srv, fmt.Errorf("chsink: read the server's settings: %w", err)
	case len(rows) > 0:
		srv.DeduplicationVersion = rows[0][0]
	}
	return srv, nil
}

// ReadServerSettings connects with opts and returns the server's version
// and the settings of ServerSettings as they are on that connection (the
// user's profile and opts.Settings applied), without a table's windows:
// what an audit records beside its counts.
func ReadServerSettings(ctx context.Context, opts ch.Options) (ServerSettings, error) {
	dial := func(ctx context.Context) (*ch.Client, error) {
		c, err := ch.Dial(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("chsink: dial %s: %w", opts.Address, err)
		}
		return c, nil
	}
	c, err := dial(ctx)
	if err != nil {
		return ServerSettings{}, err
	}
	defer c.Close()
	srv, _, err := checkServer(ctx, c, dial)
	if _, unsafe := errors.AsType[*SettingError](err); unsafe {
		err = nil // recorded as it is: the sink's own check refuses it
	}
	return srv, err
}

// logValue lists srv for a log line.
func (srv ServerSettings) logValue() slog.Value {
	return slog.GroupValue(
		slog.String("version", srv.Version),
		slog.Any("defaults", srv.Defaults),
		slog.Any("sent", srv.Sent),
		slog.String("insert_deduplication_version", srv.DeduplicationVersion),
		slog.Int64("window_blocks", srv.WindowBlocks),
		slog.Int64("window_seconds", srv.WindowSeconds),
	)
}
