package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// OpenServers ensures the MCP servers bucket exists and returns it.
func OpenServers(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, contracts.MCPServersBucketConfig(replicas))
	if err != nil {
		return nil, fmt.Errorf("mcphost: bucket %s: %w", contracts.MCPServersBucket, err)
	}
	return kv, nil
}

// ErrServerExists is returned by Add for a name already taken.
var ErrServerExists = errors.New("mcphost: an MCP server of that name is already added")

// ErrNoServer is returned by Remove for a name not added.
var ErrNoServer = errors.New("mcphost: no MCP server of that name")

// Add stores srv for workers with MCP hosting to import. With replace, a
// server of the same name is replaced; without, it is ErrServerExists.
func Add(ctx context.Context, kv jetstream.KeyValue, srv contracts.MCPServer, replace bool) error {
	if srv.AddedAt.IsZero() {
		srv.AddedAt = time.Now().UTC()
	}
	if err := srv.Validate(); err != nil {
		return err
	}
	b, _ := json.Marshal(srv)
	if replace {
		_, err := kv.Put(ctx, srv.Name, b)
		return err
	}
	if _, err := kv.Create(ctx, srv.Name, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %s (remove it first, or replace it)", ErrServerExists, srv.Name)
		}
		return err
	}
	return nil
}

// Remove deletes a server: the workers that host it disconnect and remove
// its tools from the catalogue.
func Remove(ctx context.Context, kv jetstream.KeyValue, name string) error {
	if _, err := kv.Get(ctx, name); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNoServer, name)
	} else if err != nil {
		return err
	}
	return kv.Delete(ctx, name)
}

// List returns every server, by name.
func List(ctx context.Context, kv jetstream.KeyValue) ([]contracts.MCPServer, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []contracts.MCPServer
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var srv contracts.MCPServer
		if err := json.Unmarshal(e.Value(), &srv); err != nil {
			continue
		}
		out = append(out, srv)
	}
	slices.SortFunc(out, func(a, b contracts.MCPServer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
