"""FlashAttention-3 subset trims: runtime switches whose `true` side an OLMo build never takes, compiled out.

FA3's backward instantiates every kernel twice for `deterministic` (BOOL_SWITCH(params.deterministic, ...) in
hopper/flash_bwd_launch_template.h): a slower, fixed-order dQ accumulation that neither OLMo trainer asks for
(both call the backward with deterministic=False, FA3's default). The recipe lists such switches in
`drop_switches`; this module fixes each one to false in the launch template (half the backward kernels, half its
compile work) and makes the Python entry point refuse a call that needs the dropped side, with a message naming
the subset, before the op runs. Each anchor must match once: another upstream version fails loudly. No upstream
text is stored here.
"""

from __future__ import annotations

from collections.abc import Callable

from olmo_doctor.build.subset import SubsetError

LAUNCH = "hopper/flash_bwd_launch_template.h"
SWITCH = "hopper/static_switch.h"
INTERFACE = "hopper/flash_attn_interface.py"
# switch name -> (its call in the launch template, the Python argument that selects it in _flash_attn_backward)
DROPPABLE = {"deterministic": ("BOOL_SWITCH(params.deterministic, Deterministic_, [&] {", "deterministic")}
_BACKWARD_FIRST_LINE = "    dout, q, k, v, out = [maybe_contiguous(x) for x in (dout, q, k, v, out)]\n"


def _once(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise SubsetError(f"{where}: expected one '{old.strip()}', found {text.count(old)}; "
                               "not the version the recipe pins")
    return text.replace(old, new)


def false_switch_macro(subset_name: str) -> str:
    """The macro a dropped switch becomes: always false; a true condition (a routing mistake: the Python check
    comes first) aborts with a message instead of running a kernel that was not built."""
    message = f"olmo-doctor subset build ({subset_name}): this switch was compiled out of this build"
    return f"""
// olmo-doctor --subset {subset_name}: switches whose true side this build does not compile
#include <cstdio>
#include <cstdlib>
#define OLMO_FALSE_SWITCH(COND, CONST_NAME, ...)                                   \\
  [&] {{                                                                          \\
    if (COND) {{ std::fprintf(stderr, "%s\\n", "{message}"); std::abort(); }}     \\
    constexpr static bool CONST_NAME = false;                                     \\
    return __VA_ARGS__();                                                         \\
  }}()
"""


def backward_check_source(subset_name: str, dropped: tuple[str, ...]) -> str:
    lines = ["\n\ndef _olmo_doctor_subset_backward_check(**selected):\n",
             f"    # olmo-doctor --subset {subset_name}: these backward variants were compiled out\n",
             "    for name, value in selected.items():\n",
             "        if value:\n",
             "            raise RuntimeError(f'This FlashAttention-3 build (olmo-doctor --subset "
             f"{subset_name}) has no {{name}}=True backward; rebuild without --subset for it')\n"]
    return "".join(lines) if dropped else ""


def trim(read: Callable[[str], str], subset_name: str, dropped: tuple[str, ...]) -> dict[str, str]:
    """Edits (path relative to the tree -> text) that compile `dropped` switches out; `read(rel)` gives the current
    text (with the subset's earlier edits). Nothing is written here."""
    unknown = set(dropped) - set(DROPPABLE)
    if unknown:
        raise SubsetError(f"cannot drop {sorted(unknown)} from FlashAttention-3; supported: {sorted(DROPPABLE)}")
    if not dropped:
        return {}
    launch, interface = read(LAUNCH), read(INTERFACE)
    for name in dropped:
        call, _ = DROPPABLE[name]
        launch = _once(launch, call, call.replace("BOOL_SWITCH", "OLMO_FALSE_SWITCH"), LAUNCH)
    args = ", ".join(f"{DROPPABLE[n][1]}={DROPPABLE[n][1]}" for n in dropped)
    interface = _once(interface, _BACKWARD_FIRST_LINE,
                      f"    _olmo_doctor_subset_backward_check({args})\n" + _BACKWARD_FIRST_LINE, INTERFACE)
    interface += backward_check_source(subset_name, dropped)
    return {LAUNCH: launch, SWITCH: read(SWITCH) + false_switch_macro(subset_name), INTERFACE: interface}
