# Parley's tasks. `make test` is everything CI runs (.ci/run calls exactly it).
GO ?= go
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
export TEST_DATABASE_URL

#
.PHONY: loadtest approvals docker-check docker-binary test check generate generate-check lint fmt-check vet staticcheck run bench services

## test: start or install what the tests need, check generated code, format and vet, then run every test with -race
test: services check docker-check
	$(GO) test -race -count=1 -timeout 25m ./...

## services: PostgreSQL for the store tests, Chromium and axe-core (npm) for the browser tests
services:
	@scripts/ensure-postgres.sh
	@scripts/ensure-chromium.sh
	@scripts/ensure-axe.sh >/dev/null

## check: generated files fresh, gofmt clean, go vet and staticcheck clean
check: generate-check fmt-check vet staticcheck

## generate: templ's Go files, and each store's schema (migrations/*/schema.sql, made by migrating a fresh database: PostgreSQL must answer)
GENERATED := '*_templ.go' 'migrations/*/schema.sql'
generate:
	$(GO) tool templ generate -include-version=false
	$(GO) run ./migrations/cmd/schemadump

generate-check: generate
	@git diff --exit-code -- $(GENERATED) || (echo "generated files are stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || (echo "generated files are not committed" >&2; git status --porcelain -- $(GENERATED); exit 1)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>&1); test -z "$$out" || (echo "gofmt would change:" >&2; echo "$$out" >&2; exit 1)

vet:
	$(GO) vet ./...

## staticcheck: pinned as a Go tool (go.mod's tool line); staticcheck.conf says which checks run and why
staticcheck:
	$(GO) tool staticcheck ./...

lint: check

## run: the app on the embedded store and the demo model
run:
	$(GO) run ./cmd/web

## bench: every benchmark (PostgreSQL must answer) and the approvals workload; figures go in docs/benchmarks.md
bench: services
	$(GO) test -run '^$$' -bench . -benchmem -count 1 -timeout 30m ./...
	@scripts/approvals.sh

## approvals: the approvals workload (200 awaiting conversations approved by 16 clients); ROUNDS=3, PEERS=DIR (a checkout of the peer implementations) for Eino and ADK-Go alternating, PPROF=DIR for profiles
approvals: services
	@scripts/approvals.sh

## docker-binary: build the binary exactly as the Dockerfile does (CI has no Docker engine)
docker-binary:
	CGO_ENABLED=0 GOFLAGS=-buildvcs=false $(GO) build -trimpath -ldflags="-s -w" -o bin/web-static ./cmd/web
	@if ldd bin/web-static >/dev/null 2>&1; then echo "bin/web-static is dynamically linked" >&2; exit 1; fi

## docker-check: the Docker build's binary, and the Dockerfile through a linter from npm
docker-check: docker-binary
	@cd $${TMPDIR:-/tmp} && npx --yes dockerfile-utils@0.16.3 lint $(CURDIR)/Dockerfile

## loadtest: the load run (500 conversations on a fresh PostgreSQL database, floor in the same run); CONVERSATIONS=N to change
loadtest: services
	@scripts/loadtest.sh
