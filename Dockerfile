# The graphorin binary: dispatcher, worker and the client commands.
#
#   docker build -t graphorin .
#   docker run --rm graphorin worker --nats nats://host:4222 --user worker
#
# compose.yaml builds it for its dispatchers, workers and code-mode hosts.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /graphorin ./cmd/graphorin
# Code-mode's WASM engine (goja for WASI), which `graphorin codemode
# --engine wasm --engine-module /engine.wasm` loads (the default, native
# engine is the binary itself): the image has no Go toolchain to build it.
RUN GOOS=wasip1 GOARCH=wasm go build -trimpath -o /engine.wasm ./pkg/codemode/engine

# Static binary, no shell, runs as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /graphorin /graphorin
COPY --from=build /engine.wasm /engine.wasm
ENTRYPOINT ["/graphorin"]
