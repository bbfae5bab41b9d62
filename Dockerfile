# Parley: a static binary in a minimal non-root image. Migrations and static files are embedded
# in the binary. Build: docker build -t parley .
# The build command below is the one `make docker-binary` runs in CI (no Docker engine there).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags="-s -w" -o /out/web ./cmd/web

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/web /web
ENV PARLEY_ADDR=0.0.0.0:8080 \
    PARLEY_DATA_DIR=/data \
    PARLEY_ENV=production
VOLUME ["/data"]
EXPOSE 8080
USER nonroot:nonroot
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 CMD ["/web", "healthcheck"]
ENTRYPOINT ["/web"]
CMD ["serve"]
