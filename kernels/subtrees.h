// A population as one graph of its distinct subtrees (hash-consing): a subtree that occurs in several trees,
// or several times in one tree, becomes one node, which an evaluation computes once per row. Populations of
// a regression run repeat most of their subtrees (crossover copies them; elites and their children share
// them): 53% of the function nodes of a Feynman run's generation 1 repeat one already seen, 91% at
// generation 100. Subtrees are equal when they are the same node for node (function ids, variable indices,
// constant bits), so a node's values are exactly the interpreter's: the same function of the same operands.
//
// A Modi node (OUTPUT_FLAG) adds f(children) to its output and passes its last child's value up: in the graph
// it is that last child, and f(children) an ordinary function node its tree emits. Each tree keeps the
// interpreter's order of emissions (reverse prefix order, then a non-Modi root to output 0), so sums of
// several emissions into one output round as the interpreter's do.
#pragma once
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "nodes.h"

namespace gprl {

struct SubtreeGraph {
  // Nodes in an order where children come first; each is in one of the lists of its kind. child[3 * n + j]:
  // the j-th argument's node (a node's first argument for the unused ones, as the interpreters pass it).
  std::vector<int16_t> code;  // variable index or function id
  std::vector<float> value;   // CONST
  std::vector<int32_t> child;
  std::vector<int32_t> functions, constants, variables;  // the nodes of each kind, in graph order
  // Per tree t: emissions [emit_begin[t], emit_begin[t + 1]) as (output, node), in the interpreter's order.
  std::vector<int64_t> emit_begin;
  std::vector<uint8_t> emit_out;
  std::vector<int32_t> emit_node;

  int64_t size() const { return int64_t(code.size()); }
};

namespace subtrees_detail {

// Open addressing over 16-byte keys (kind | code, then three node ids or a constant's bits); a probe reads
// one slot of 24 bytes. It doubles at half full: a build that stops early (max_functions) never paid for a
// table of the whole population.
struct Table {
  struct Slot {
    uint64_t k0, k1;
    int32_t id;  // -1: empty
  };
  std::vector<Slot> slots = std::vector<Slot>(1024, Slot{0, 0, -1});
  uint64_t mask = 1023, used = 0;

  static uint64_t mix(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 27, x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  Slot& probe(uint64_t a, uint64_t b) {
    for (uint64_t h = mix(a ^ mix(b)) & mask;; h = (h + 1) & mask) {
      Slot& s = slots[h];
      if (s.id < 0 || (s.k0 == a && s.k1 == b)) return s;
    }
  }
  // The node of key (a, b), or `fresh` (stored under the key) when it is new.
  int32_t find_or_add(uint64_t a, uint64_t b, int32_t fresh) {
    Slot& s = probe(a, b);
    if (s.id >= 0) return s.id;
    s = Slot{a, b, fresh};
    if (2 * ++used > slots.size()) {
      std::vector<Slot> old(2 * slots.size(), Slot{0, 0, -1});
      old.swap(slots);
      mask = slots.size() - 1;
      for (const Slot& o : old)
        if (o.id >= 0) probe(o.k0, o.k1) = o;
    }
    return fresh;
  }
};

}  // namespace subtrees_detail

// The graph of trees [0, P), or none once it holds more than `max_functions` distinct function nodes.
// tree_at(t) is tree t as the CPU interpreter reads it (pointers kind, code, out, value to its nodes; len),
// and its nodes are read the interpreter's way (a stack over reverse prefix order), with the same checks.
template <typename TreeAt>
std::optional<SubtreeGraph> build_subtree_graph(int64_t P, TreeAt&& tree_at, int64_t n_in, int64_t n_out,
                                                int64_t max_stack, size_t max_functions) {
  SubtreeGraph g;
  g.emit_begin.reserve(P + 1);
  subtrees_detail::Table table;
  std::vector<int32_t> stack(std::max<int64_t>(max_stack, 1));
  auto node = [&](uint8_t k, int16_t c, float v, int32_t a, int32_t b, int32_t d) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    const uint64_t key0 = uint64_t(k) | uint64_t(uint16_t(c)) << 8 | uint64_t(uint32_t(a)) << 32;
    const uint64_t key1 = k == CONST ? bits : uint64_t(uint32_t(b)) | uint64_t(uint32_t(d)) << 32;
    const int32_t n = table.find_or_add(key0, key1, int32_t(g.size()));
    if (n == int32_t(g.size())) {
      g.code.push_back(c), g.value.push_back(v);
      g.child.insert(g.child.end(), {a, b, d});
      (k == FUNC ? g.functions : k == CONST ? g.constants : g.variables).push_back(n);
    }
    return n;
  };
  g.emit_begin.push_back(0);
  for (int64_t t = 0; t < P; ++t) {
    const auto tree = tree_at(t);
    int sp = 0;
    for (int i = tree.len - 1; i >= 0; --i) {
      const uint8_t k = tree.kind[i] & KIND_MASK;
      if (k == FUNC) {
        const int fn = tree.code[i], ar = arity(fn);
        TORCH_CHECK(sp >= ar, "gprl: malformed tree (a function node lacks children); check it with gprl.validate");
        const int32_t a = stack[sp - 1], b = ar >= 2 ? stack[sp - 2] : a, c = ar >= 3 ? stack[sp - 3] : a;
        sp -= ar - 1;  // the result takes the last child's slot
        const int32_t f = node(FUNC, int16_t(fn), 0.f, a, b, c);
        if (g.functions.size() > max_functions) return std::nullopt;
        if (tree.kind[i] & OUTPUT_FLAG) {  // Modi: emits f, passes the last child's value (its slot) up
          TORCH_CHECK(tree.out[i] < n_out, "gprl: output index ", std::to_string(tree.out[i]), " >= n_out ",
                      std::to_string(n_out));
          g.emit_out.push_back(tree.out[i]), g.emit_node.push_back(f);
        } else {
          stack[sp - 1] = f;
        }
        continue;
      }
      TORCH_CHECK(sp < max_stack, "gprl: evaluation stack overflow (max_stack too small)");
      if (k == VAR) {
        TORCH_CHECK(tree.code[i] >= 0 && tree.code[i] < n_in, "gprl: variable index ", std::to_string(tree.code[i]),
                    " >= n_in ", std::to_string(n_in));
        stack[sp++] = node(VAR, tree.code[i], 0.f, 0, 0, 0);
      } else {  // CONST (PAD never lies inside a tree)
        stack[sp++] = node(CONST, 0, tree.value[i], 0, 0, 0);
      }
    }
    if (tree.len > 0 && !(tree.kind[0] & OUTPUT_FLAG)) g.emit_out.push_back(0), g.emit_node.push_back(stack[0]);
    g.emit_begin.push_back(int64_t(g.emit_out.size()));
  }
  return g;
}

}  // namespace gprl
