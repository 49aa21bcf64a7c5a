// What a model is built and planned for (docs/design.md §2.1, Memory).
#pragma once

namespace echo::model {

// Training: forward + backward, gradients and AdamW moments. Evaluation: forwards only, which keep
// one layer's saved tensors at a time (Qwen3Model::forward without keep_activations); the model
// allocates no gradients and the plan counts no moments.
enum class Pass { training, evaluation };

}  // namespace echo::model
