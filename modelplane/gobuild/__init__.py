"""The Go build wing: every Go binary modelplane uses, built from Go modules into one per-user
cache the same way.

- `gomod`: reading upstream go.mod files, writing wrapper modules (pure text);
- `gotool`: finding `go` (``$MODELPLANE_GO``) and running it with one environment;
- `cache`: the cache folders, their locks, one manifest format and the one
  lock-build-publish path (`ensure_built`);
- thin per-set builders: `kube` (control plane + kine), `fleet` (kwok, LWS, Traefik),
  `prometheus`; the engine's is `modelplane.engine.gobuild` (it also finds installed engines
  and Pulumi's official archives).

`modelplane.toolchain` builds the sets concurrently. This package imports nothing else of
modelplane.
"""
