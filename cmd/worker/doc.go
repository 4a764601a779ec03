// Command worker runs Airlock's worker: it takes task specs off Redis
// (asynq), runs their steps confined in fresh workspaces and stores a run
// record per task. See the README for flags and isolation tiers.
package main
