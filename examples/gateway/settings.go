package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// settings registers flags that each default to an environment variable,
// so every setting has both and -h lists both: "-topic (KAFKA_TOPIC)".
type settings struct {
	fs     *flag.FlagSet
	getenv func(string) string
	env    map[string]string // flag name -> environment variable
	errs   []error           // environment values that do not parse
}

func newSettings(fs *flag.FlagSet, getenv func(string) string) *settings {
	return &settings{fs: fs, getenv: getenv, env: map[string]string{}}
}

// lookup returns the environment's value of env, or "" when unset.
func (s *settings) lookup(name, env string) string {
	s.env[name] = env
	return s.getenv(env)
}

func (s *settings) usage(usage, env string) string { return usage + " (" + env + ")" }

func (s *settings) bad(env, v string, err error) {
	s.errs = append(s.errs, fmt.Errorf("environment %s=%q: %v", env, v, err))
}

func (s *settings) String(p *string, name, env, def, usage string) {
	if v := s.lookup(name, env); v != "" {
		def = v
	}
	s.fs.StringVar(p, name, def, s.usage(usage, env))
}

// Bool registers a flag that is false unless given; BoolOn one that is
// true unless turned off (-name=false, or its variable false).
func (s *settings) Bool(p *bool, name, env string, usage string) {
	s.boolean(p, name, env, false, usage)
}

func (s *settings) BoolOn(p *bool, name, env string, usage string) {
	s.boolean(p, name, env, true, usage)
}

func (s *settings) boolean(p *bool, name, env string, def bool, usage string) {
	if v := s.lookup(name, env); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.bad(env, v, err)
		}
		def = b
	}
	s.fs.BoolVar(p, name, def, s.usage(usage, env+"="+strconv.FormatBool(!def)))
}

func (s *settings) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v := s.lookup(name, env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.bad(env, v, err)
		}
		def = d
	}
	s.fs.DurationVar(p, name, def, s.usage(usage, env))
}

func (s *settings) Int(p *int, name, env string, def int, usage string) {
	if v := s.lookup(name, env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.bad(env, v, err)
		}
		def = n
	}
	s.fs.IntVar(p, name, def, s.usage(usage, env))
}

func (s *settings) Int64(p *int64, name, env string, def int64, usage string) {
	if v := s.lookup(name, env); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.bad(env, v, err)
		}
		def = n
	}
	s.fs.Int64Var(p, name, def, s.usage(usage, env))
}

func (s *settings) Float64(p *float64, name, env string, def float64, usage string) {
	if v := s.lookup(name, env); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.bad(env, v, err)
		}
		def = f
	}
	s.fs.Float64Var(p, name, def, s.usage(usage, env))
}

func (s *settings) Uint64(p *uint64, name, env string, def uint64, usage string) {
	if v := s.lookup(name, env); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.bad(env, v, err)
		}
		def = n
	}
	s.fs.Uint64Var(p, name, def, s.usage(usage, env))
}

// list splits a comma-separated flag value, dropping blanks.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
