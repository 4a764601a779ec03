//go:build linux && airlock_nodev

package main

// A production build (go build -tags airlock_nodev ./cmd/worker, as the
// Dockerfile does) has no dev mode: no embedded Redis, no demo, nothing
// of examples/ linked in. -dev is still a flag, which says so.

import (
	"context"
	"errors"
	"io"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/worker"
)

// devUsage is the usage line of -dev.
const devUsage = "dev mode: not built into this binary (built with -tags airlock_nodev); from a source checkout: go run ./cmd/worker -dev"

// errNoDev is what -dev says in a build without dev mode.
var errNoDev = errors.New("-dev: dev mode is not built into this binary (built with -tags airlock_nodev); from a source checkout: go run ./cmd/worker -dev")

// devMode is empty: startDev always refuses.
type devMode struct{}

func startDev(*options, map[string]bool, zerolog.Logger) (*devMode, error) { return nil, errNoDev }

func (*devMode) close()                                                                         {}
func (*devMode) configure(*worker.Config) error                                                 { return nil }
func (*devMode) demo(context.Context, redis.UniversalClient, string, io.Writer, zerolog.Logger) {}
