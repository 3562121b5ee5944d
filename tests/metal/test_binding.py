"""Kernel arguments bind by name, from the slots the generated source declares."""

from __future__ import annotations

import pytest

from conveyor_metal._binding import bind, pack_scalars, parse_c, parse_metal

# A kernel whose output comes before its inputs, as TileLang may order them (tilelang#3196).
_REORDERED = """
struct k_kernel_args_t {
  int n[2];
  int m[2];
};
[[kernel, max_total_threads_per_threadgroup(256)]] void k_kernel(
  device float* __restrict Y [[ buffer(0) ]],
  const device half* __restrict A [[ buffer(1) ]],
  const device int* __restrict meta [[ buffer(2) ]],
  constant k_kernel_args_t& arg [[ buffer(3) ]],
  uint3 blockIdx [[threadgroup_position_in_grid]]
) { }
"""


class TestParseMetal:
    """``parse_metal`` reads names, slots, element types and the scalar struct."""

    def test_reordered_output_first_source_binds_each_name_to_its_slot(self) -> None:
        binding = parse_metal(_REORDERED)
        assert binding.kernel == "k_kernel"
        assert [(b.name, b.index, b.element, b.writable) for b in binding.buffers] == [
            ("Y", 0, "float", True),
            ("A", 1, "half", False),
            ("meta", 2, "int", False),
        ]
        assert binding.scalars == ("n", "m")
        assert binding.scalar_slot == 3
        assert binding.scalar_words == 2
        args = bind(binding, {"A": "a", "meta": "meta", "Y": "y"}, {"n": 5, "m": 7}, "packed")
        assert args == ["y", "a", "meta", "packed"]

    def test_scalars_pack_one_field_per_two_words(self) -> None:
        binding = parse_metal(_REORDERED)
        assert pack_scalars(binding, {"n": 5, "m": 7}) == [5, 0, 7, 0]

    def test_source_without_kernel_is_refused(self) -> None:
        with pytest.raises(ValueError, match="no `\\[\\[kernel\\]\\] void name\\(`"):
            parse_metal("int x;")

    def test_gap_in_buffer_slots_is_refused(self) -> None:
        source = _REORDERED.replace("buffer(2)", "buffer(5)")
        with pytest.raises(ValueError, match=r"buffer slots \[0, 1, 3, 5\]"):
            parse_metal(source)


class TestBind:
    """``bind`` refuses a wrong or missing name instead of binding by position."""

    def test_wrong_buffer_name_is_refused(self) -> None:
        binding = parse_metal(_REORDERED)
        with pytest.raises(KeyError, match="do not match the kernel's"):
            bind(binding, {"B": 1, "meta": 2, "Y": 3}, {"n": 1, "m": 1}, 4)

    def test_missing_dynamic_dimension_is_refused(self) -> None:
        binding = parse_metal(_REORDERED)
        with pytest.raises(KeyError, match=r"no value for dynamic dimension\(s\) \['m'\]"):
            bind(binding, {"A": 1, "meta": 2, "Y": 3}, {"n": 1}, 4)

    def test_metal_struct_without_packed_scalars_is_refused(self) -> None:
        binding = parse_metal(_REORDERED)
        with pytest.raises(KeyError, match="needs the packed scalars"):
            bind(binding, {"A": 1, "meta": 2, "Y": 3}, {"n": 1, "m": 1})


class TestParseC:
    """``parse_c`` reads the C target's signature: buffers by position, then scalars."""

    def test_c_signature_binds_buffers_then_scalars(self) -> None:
        source = "int32_t cv_add_kernel(float* X0, int32_t* meta, float* Y, int32_t n) {\n}"
        binding = parse_c(source)
        assert [(b.name, b.index) for b in binding.buffers] == [("X0", 0), ("meta", 1), ("Y", 2)]
        assert binding.scalars == ("n",)
        assert bind(binding, {"Y": "y", "X0": "x", "meta": "m"}, {"n": 9}) == ["x", "m", "y", 9]

    def test_source_without_c_kernel_is_refused(self) -> None:
        with pytest.raises(ValueError, match="no `int32_t <name>_kernel"):
            parse_c("void f(void) {}")
