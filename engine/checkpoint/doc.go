// Package checkpoint reads a LocateAnything checkpoint directory: the model dimensions and
// token ids from config.json and preprocessor_config.json, and the weights from one
// model.safetensors file or from the shards listed in model.safetensors.index.json.
//
// Weights are memory-mapped read-only and never copied: Tensor.Data slices into the
// mapping and stays valid until Model.Close. Open checks every tensor the configuration
// implies (names from the layer counts, shapes from the dimensions, dtype BF16, F16 or
// F32) before it returns, so a backend handed a *Model can index the data without
// further checks.
package checkpoint
