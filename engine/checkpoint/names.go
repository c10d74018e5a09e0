package checkpoint

import "fmt"

// LMHeadName is the optional output projection; without it the logits use the token
// embedding matrix (tied embeddings).
const LMHeadName = "language_model.lm_head.weight"

// TensorSpec is one tensor that a configuration implies: its name in the safetensors
// files and its shape. Linear weights are [out, in].
type TensorSpec struct {
	Name  string
	Shape []int64
}

// ExpectedTensors lists every tensor the forward pass reads, in forward order, with the
// shapes c implies. The optional LM head (LMHeadName, [vocab, hidden]) is not in the list.
func (c *Config) ExpectedTensors() []TensorSpec {
	var specs []TensorSpec
	add := func(name string, shape ...int) {
		s := make([]int64, len(shape))
		for i, d := range shape {
			s[i] = int64(d)
		}
		specs = append(specs, TensorSpec{Name: name, Shape: s})
	}

	v := c.Vision
	add("vision_model.patch_embed.proj.weight", v.Hidden, 3, v.PatchSize, v.PatchSize)
	add("vision_model.patch_embed.proj.bias", v.Hidden)
	add("vision_model.patch_embed.pos_emb.weight", v.PosEmbHeight, v.PosEmbWidth, v.Hidden)
	for i := range v.Layers {
		p := fmt.Sprintf("vision_model.encoder.blocks.%d.", i)
		add(p+"norm0.weight", v.Hidden)
		add(p+"norm0.bias", v.Hidden)
		add(p+"wqkv.weight", 3*v.Hidden, v.Hidden)
		add(p+"wqkv.bias", 3*v.Hidden)
		add(p+"wo.weight", v.Hidden, v.Hidden)
		add(p+"wo.bias", v.Hidden)
		add(p+"norm1.weight", v.Hidden)
		add(p+"norm1.bias", v.Hidden)
		add(p+"mlp.fc0.weight", v.Intermediate, v.Hidden)
		add(p+"mlp.fc0.bias", v.Intermediate)
		add(p+"mlp.fc1.weight", v.Hidden, v.Intermediate)
		add(p+"mlp.fc1.bias", v.Hidden)
	}
	add("vision_model.encoder.final_layernorm.weight", v.Hidden)
	add("vision_model.encoder.final_layernorm.bias", v.Hidden)

	// Projector: LayerNorm over the merged patch, Linear, GELU, Linear.
	t := c.Text
	merged := v.Hidden * v.MergeKernel * v.MergeKernel
	add("mlp1.0.weight", merged)
	add("mlp1.0.bias", merged)
	add("mlp1.1.weight", t.Hidden, merged)
	add("mlp1.1.bias", t.Hidden)
	add("mlp1.3.weight", t.Hidden, t.Hidden)
	add("mlp1.3.bias", t.Hidden)

	add("language_model.model.embed_tokens.weight", t.Vocab, t.Hidden)
	qDim, kvDim := t.Heads*t.HeadDim, t.KVHeads*t.HeadDim
	for i := range t.Layers {
		p := fmt.Sprintf("language_model.model.layers.%d.", i)
		add(p+"input_layernorm.weight", t.Hidden)
		add(p+"self_attn.q_proj.weight", qDim, t.Hidden)
		add(p+"self_attn.q_proj.bias", qDim)
		add(p+"self_attn.k_proj.weight", kvDim, t.Hidden)
		add(p+"self_attn.k_proj.bias", kvDim)
		add(p+"self_attn.v_proj.weight", kvDim, t.Hidden)
		add(p+"self_attn.v_proj.bias", kvDim)
		add(p+"self_attn.o_proj.weight", t.Hidden, qDim)
		add(p+"post_attention_layernorm.weight", t.Hidden)
		add(p+"mlp.gate_proj.weight", t.Intermediate, t.Hidden)
		add(p+"mlp.up_proj.weight", t.Intermediate, t.Hidden)
		add(p+"mlp.down_proj.weight", t.Hidden, t.Intermediate)
	}
	add("language_model.model.norm.weight", t.Hidden)
	return specs
}

// LMHeadShape is the shape the optional LM head must have.
func (c *Config) LMHeadShape() []int64 {
	return []int64{int64(c.Text.Vocab), int64(c.Text.Hidden)}
}
