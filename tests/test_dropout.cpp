// model/dropout.h: the mask's values and keep rate, reproducibility from the
// torch seed, independence from the thread count, and the gradient.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <ATen/Parallel.h>

#include <cmath>

#include "shardtrain/model/dropout.h"

using namespace shardtrain;

TEST_CASE("dropout noise: 0 or 1 / (1 - p), keep rate 1 - p, reproducible from the seed, any thread count") {
  const int64_t n = 1000001;  // odd: the last pair has one element
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    const at::Tensor like = at::empty({n});
    at::manual_seed(3);
    const at::Tensor noise = dropout_noise(like, p);
    const float kept = 1.0f / static_cast<float>(1.0 - p);  // at::dropout's kept value
    CHECK(((noise == 0) | (noise == kept)).all().item<bool>());
    // Binomial(n, 1 - p): 6 standard deviations <= 0.003 of n.
    const double rate = (noise > 0).to(at::kDouble).mean().item<double>();
    CHECK(std::abs(rate - (1 - p)) <= 6 * std::sqrt(p * (1 - p) / n));
    // Neighbours are not correlated (the two halves of one 64-bit draw, and consecutive draws).
    const at::Tensor keep = (noise > 0).to(at::kDouble) - (1 - p);
    const double lag1 = (keep.narrow(0, 0, n - 1) * keep.narrow(0, 1, n - 1)).mean().item<double>() / (p * (1 - p));
    const double lag2 = (keep.narrow(0, 0, n - 2) * keep.narrow(0, 2, n - 2)).mean().item<double>() / (p * (1 - p));
    CHECK(std::abs(lag1) < 0.01);
    CHECK(std::abs(lag2) < 0.01);

    at::manual_seed(3);
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    const at::Tensor again = dropout_noise(like, p);
    at::set_num_threads(threads);
    CHECK(at::equal(noise, again));
    CHECK_FALSE(at::equal(noise, dropout_noise(like, p)));  // the next call draws a new seed
  }
  CHECK((dropout_noise(at::empty({3, 4}, at::kDouble), 0.2).scalar_type() == at::kDouble));
}

TEST_CASE("dropout: identity when off, x * noise when on, gradient grad * noise") {
  const at::Tensor x = at::randn({64, 33}).requires_grad_(true);
  CHECK(shardtrain::dropout(x, 0.3, false).is_same(x));
  CHECK(shardtrain::dropout(x, 0.0, true).is_same(x));
  at::manual_seed(9);
  const at::Tensor y = shardtrain::dropout(x, 0.3, true);
  at::manual_seed(9);
  const at::Tensor noise = dropout_noise(x, 0.3);
  CHECK(at::equal(y.detach(), x.detach() * noise));
  y.sum().backward();
  CHECK(at::equal(x.grad(), noise));
}
