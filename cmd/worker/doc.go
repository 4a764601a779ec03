// Command worker runs Airlock's worker: it takes task specs off Redis
// (asynq), runs their steps confined in fresh workspaces and stores a run
// record per task. See docs/cli.md#worker for flags and docs/isolation.md for
// isolation tiers.
package main
