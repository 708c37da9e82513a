// Package schema compiles and applies JSON Schemas, and infers them from Go
// types. It is a thin layer over github.com/santhosh-tekuri/jsonschema/v6
// that fixes the choices every service must agree on:
//
//   - Draft 2020-12 is the default for schemas without "$schema".
//   - No remote references: a "$ref" that is not inside the schema itself
//     fails to compile. Schemas arrive from tool authors and MCP servers;
//     compiling one must never reach the network or the file system.
//   - "format" is asserted (date-time, email, uuid, …). Draft 2020-12 makes
//     it an annotation by default, but a tool author who writes
//     format=email expects malformed addresses to be rejected before the
//     tool runs. Unknown formats are ignored.
//
// Validation failures are reported as a *ValidationError naming the most
// specific failing location, e.g.
//
//	schema: at /limit: must be <= 100, got 500
//
// so that the message can go back to a model as an invalid_input error and
// be acted on.
//
// # Inference
//
// Infer and InferType derive a schema from a Go type the way encoding/json
// would encode it: property names from json tags, embedded structs
// flattened, omitempty fields optional. Constraints come from two tags:
//
//	Limit int    `json:"limit,omitempty" desc:"Maximum rows." jsonschema:"minimum=1,maximum=100,default=20"`
//	Unit  string `json:"unit" jsonschema:"enum=c|f"`
//
// # Why values that can be nil are nullable
//
// encoding/json writes a nil pointer, slice or map as null unless the field
// has omitempty (or omitzero). A schema that said "type": "array" for a
// plain []T field would reject the output of a tool that returns no items,
// so such fields are inferred as "type": ["array", "null"].
package schema
