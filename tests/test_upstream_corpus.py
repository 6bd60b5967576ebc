"""scripts/upstream_corpus.py: reading lit's RUN lines, the FileCheck subset, and one
end-to-end run over a corpus folder of one program written here (llvm-project's own test
programs are not in the repository: docs/conformance.md "The upstream test programs")."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import pytest

from clang_toolchains import CLANG16, ROOT

_spec = importlib.util.spec_from_file_location("upstream_corpus",
                                               ROOT / "scripts" / "upstream_corpus.py")
uc = importlib.util.module_from_spec(_spec)
sys.modules["upstream_corpus"] = uc      # dataclasses look their module up
_spec.loader.exec_module(uc)


def test_parse_compile_and_run_lines():
    src = textwrap.dedent("""\
        // RUN: %libomptarget-compile-generic \\
        // RUN:   -fopenmp-version=51 -DCLAUSE=to
        // RUN: env LIBOMPTARGET_INFO=4 %libomptarget-run-fail-generic 2>&1 \\
        // RUN: | %fcheck-generic -check-prefix=A -check-prefix=B
        // RUN: %libomptarget-compileoptxx-run-and-check-generic
        // RUN: %libomptarget-compile-run-and-check-nvptx64-nvidia-cuda
        // RUN: %libomptarget-compile-generic && %libomptarget-run-generic
        """)
    v = uc.parse(src)
    assert [x.extra for x in v] == [["-fopenmp-version=51", "-DCLAUSE=to"], ["-O3"], []]
    assert [x.cxx for x in v] == [False, True, False]
    r = v[0].runs[0]
    assert (r.env, r.fail, r.stderr_too, r.prefixes) == ({"LIBOMPTARGET_INFO": "4"}, True,
                                                         True, ("A", "B"))
    assert v[1].runs[0].prefixes == ("CHECK",) and not v[1].runs[0].stderr_too
    assert v[2].runs[0].prefixes is None and not v[2].runs[0].fail


@pytest.mark.parametrize("src, why", [
    ("// RUN: %libomptarget-compile-run-and-check-generic\n// REQUIRES: amdgcn-amd-amdhsa",
     "REQUIRES"),
    ("// RUN: %libomptarget-compile-run-and-check-generic\n"
     "// UNSUPPORTED: x86_64-unknown-linux-gnu", "UNSUPPORTED"),
    ("// RUN: %clang -fopenmp %s -o %t && %t", "RUN"),
    ("// RUN: %libomptarget-compile-generic\n// RUN: %libomptarget-run-generic | sort", "RUN"),
    ("int main() {}", "no RUN line"),
])
def test_parse_refuses_what_it_cannot_run(src, why):
    with pytest.raises(uc.Unsupported, match=why):
        uc.parse(src)


def test_unified_shared_memory_is_no_obstacle():
    v = uc.parse("// RUN: %libomptarget-compile-run-and-check-generic\n"
                 "// REQUIRES: unified_shared_memory\n")
    assert len(v) == 1


CHECKS = textwrap.dedent("""\
    // CHECK: addr=0x[[#%x,ADDR:]], size=[[#%u,SIZE:]]
    // CHECK-NOT: omptarget
    // CHECK: value [[V:[0-9]+]]
    // CHECK-NEXT: again [[V]]
    // CHECK: host address 0x{{0*}}[[#ADDR]] ([[#SIZE]] bytes)
    // CHECK-NOT: after
    """)


def test_filecheck_variables_and_order():
    out = ("addr=0x7ffe10, size=4\nvalue 12\nagain 12\n"
           "omptarget message: host address 0x00007ffe10 (4 bytes)\n")
    assert uc.filecheck(CHECKS, out) is None


@pytest.mark.parametrize("out, why", [
    ("addr=0x7ffe10, size=4\nomptarget x\nvalue 12\nagain 12\n"
     "host address 0x7ffe10 (4 bytes)\n", "CHECK-NOT: omptarget"),
    ("addr=0x7ffe10, size=4\nvalue 12\nagain 13\nhost address 0x7ffe10 (4 bytes)\n",
     "CHECK-NEXT"),
    ("addr=0x7ffe10, size=4\nvalue 12\n\nagain 12\nhost address 0x7ffe10 (4 bytes)\n",
     "CHECK-NEXT"),
    ("addr=0x7ffe10, size=4\nvalue 12\nagain 12\nhost address 0x7ffe11 (4 bytes)\n",
     "no match"),
    ("addr=0x7ffe10, size=4\nvalue 12\nagain 12\nhost address 0x7ffe10 (4 bytes)\nafter\n",
     "CHECK-NOT: after"),
])
def test_filecheck_failures(out, why):
    assert why in (uc.filecheck(CHECKS, out) or "")


def test_filecheck_prefixes_and_whitespace():
    src = "// A: x   =  1\n// CHECK: never\n// A-LABEL: next\n"
    assert uc.filecheck(src, "x = 1\nnext\n", ("A",)) is None
    with pytest.raises(uc.Unsupported):
        uc.filecheck("// CHECK-DAG: x\n", "x\n")


@pytest.mark.skipif(CLANG16.missing() is not None, reason=str(CLANG16.missing()))
def test_a_corpus_run(tmp_path, capsys):
    corpus = tmp_path / "corpus" / "mapping"
    corpus.mkdir(parents=True)
    (corpus / "present_fail.c").write_text(textwrap.dedent("""\
        // RUN: %libomptarget-compile-generic -fopenmp-version=51
        // RUN: %libomptarget-run-fail-generic 2>&1 | %fcheck-generic
        #include <stdio.h>
        int main(void) {
          int i = 1;
          // CHECK: before
          fprintf(stderr, "before\\n");
          // CHECK: Libomptarget fatal error 1: failure of target construct
        #pragma omp target update to(present : i)
          // CHECK-NOT: after
          fprintf(stderr, "after\\n");
          return 0;
        }
        """))
    (corpus / "gpu_only.c").write_text("// RUN: %libomptarget-compile-run-and-check-generic\n"
                                       "// REQUIRES: nvptx64-nvidia-cuda\nint main(){}\n")
    out = tmp_path / "r.json"
    assert uc.main([str(tmp_path / "corpus"), "--cc", "16", "--json", str(out)]) == 0
    rows = {r["program"]: r for r in json.loads(out.read_text())}
    assert rows["mapping/gpu_only.c"]["status"] == "skipped"
    r = rows["mapping/present_fail.c"]
    assert (r["status"], r["ref_pass"], r["shim_pass"], r["same"]) == ("ran", True, True, True)
    assert "| clang-16 | 2 | 1 | 0 | 1 | 1 | 1 | 1 |" in capsys.readouterr().out
