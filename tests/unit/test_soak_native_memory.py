"""The soak's probe of the job host's native memory, on what jcmd printed (OpenJDK 17.0.15, Debian) for a sleeping
`java -XX:NativeMemoryTracking=summary -Xmx256m Sleep.java` (G1), the same with -XX:+UseParallelGC and no NMT;
trailing spaces removed."""

from tests.benchmarks.bench_soak import heap_range, native_columns, native_memory

SUMMARY = """\
3478:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=1714393KB, committed=344273KB
       malloc: 9985KB #62507
       mmap:   reserved=1704408KB, committed=334288KB

-                 Java Heap (reserved=262144KB, committed=262144KB)
                            (mmap: reserved=262144KB, committed=262144KB)

-                     Class (reserved=1048792KB, committed=1368KB)
                            (classes #2498)
                            (  instance classes #2246, array classes #252)
                            (malloc=216KB #4021) (at peak)
                            (mmap: reserved=1048576KB, committed=1152KB)
                            (  Metadata:   )
                            (    reserved=65536KB, committed=7936KB)
                            (    used=7841KB)
                            (    waste=95KB =1.20%)
                            (  Class space:)
                            (    reserved=1048576KB, committed=1152KB)
                            (    used=1062KB)
                            (    waste=90KB =7.78%)

-                    Thread (reserved=21559KB, committed=927KB)
                            (thread #21)
                            (stack: reserved=21504KB, committed=872KB)
                            (malloc=32KB #130) (peak=40KB #134)
                            (arena=23KB #40) (peak=914KB #34)

-                      Code (reserved=247864KB, committed=7724KB)
                            (malloc=176KB #1818) (at peak)
                            (mmap: reserved=247688KB, committed=7548KB)

-                        GC (reserved=47463KB, committed=47463KB)
                            (malloc=4931KB #1627) (peak=4953KB #2035)
                            (mmap: reserved=42532KB, committed=42532KB)

-                  Compiler (reserved=186KB, committed=186KB)
                            (malloc=22KB #88) (peak=37KB #99)
                            (arena=165KB #5) (peak=3827KB #14)

-                  Internal (reserved=232KB, committed=232KB)
                            (malloc=196KB #2571) (at peak)
                            (mmap: reserved=36KB, committed=36KB)

-                     Other (reserved=10KB, committed=10KB)
                            (malloc=10KB #2) (at peak)

-                    Symbol (reserved=2805KB, committed=2805KB)
                            (malloc=2445KB #49854) (at peak)
                            (arena=360KB #1) (at peak)

-    Native Memory Tracking (reserved=1010KB, committed=1010KB)
                            (malloc=34KB #596) (at peak)
                            (tracking overhead=977KB)

-        Shared class space (reserved=16384KB, committed=12060KB)
                            (mmap: reserved=16384KB, committed=12060KB)

-               Arena Chunk (reserved=175KB, committed=175KB)
                            (malloc=175KB #60) (peak=4363KB #160)

-                    Module (reserved=156KB, committed=156KB)
                            (malloc=156KB #1209) (at peak)

-                 Safepoint (reserved=8KB, committed=8KB)
                            (mmap: reserved=8KB, committed=8KB)

-           Synchronization (reserved=36KB, committed=36KB)
                            (malloc=36KB #487) (at peak)

-            Serviceability (reserved=1KB, committed=1KB)
                            (malloc=1KB #6) (at peak)

-                 Metaspace (reserved=65565KB, committed=7965KB)
                            (malloc=29KB #13) (at peak)
                            (mmap: reserved=65536KB, committed=7936KB)

-      String Deduplication (reserved=1KB, committed=1KB)
                            (malloc=1KB #8) (at peak)

-           Object Monitors (reserved=1KB, committed=1KB)
                            (malloc=1KB #3) (at peak)

"""

G1_HEAP_INFO = """\
3478:
 garbage-first heap   total 262144K, used 5505K [0x00000000f0000000, 0x0000000100000000)
  region size 1024K, 4 young (4096K), 2 survivors (2048K)
 Metaspace       used 8903K, committed 9088K, reserved 1114112K
  class space    used 1062K, committed 1152K, reserved 1048576K
"""

PARALLEL_HEAP_INFO = """\
9065:
 PSYoungGen      total 38400K, used 14724K [0x00000000fd580000, 0x0000000100000000, 0x0000000100000000)
  eden space 33280K, 44% used [0x00000000fd580000,0x00000000fe3e12b0,0x00000000ff600000)
  from space 5120K, 0% used [0x00000000ffb00000,0x00000000ffb00000,0x0000000100000000)
  to   space 5120K, 0% used [0x00000000ff600000,0x00000000ff600000,0x00000000ffb00000)
 ParOldGen       total 87552K, used 0K [0x00000000f8000000, 0x00000000fd580000, 0x00000000fd580000)
  object space 87552K, 0% used [0x00000000f8000000,0x00000000f8000000,0x00000000fd580000)
 Metaspace       used 8939K, committed 9088K, reserved 1114112K
  class space    used 1062K, committed 1152K, reserved 1048576K
"""

WITHOUT_NMT = """\
9065:
Native memory tracking is not enabled
"""

KB = 1024


def test_the_summary_gives_each_category_committed() -> None:
    committed = native_memory(SUMMARY)
    assert committed["Total"] == 344273 * KB
    assert {name: committed[name] // KB for name in ("Java Heap", "Class", "Metaspace", "Shared class space",
            "Thread", "Code", "GC", "Internal", "Other", "Symbol", "Arena Chunk")} == {
        "Java Heap": 262144, "Class": 1368, "Metaspace": 7965, "Shared class space": 12060, "Thread": 927,
        "Code": 7724, "GC": 47463, "Internal": 232, "Other": 10, "Symbol": 2805, "Arena Chunk": 175,
    }  # fmt: skip
    assert sum(v for k, v in committed.items() if k != "Total") == 344272 * KB  # the parts, rounded by NMT


def test_the_host_row_splits_what_nmt_counts_and_what_it_cannot_see() -> None:
    # A JVM of 400 MB RSS, 200 MB of its heap touched: NMT counts 353 MB committed, 268 of them the heap; the
    # rest of the RSS (its heap as resident) is what native libraries and glibc hold.
    columns = native_columns(native_memory(SUMMARY), jvm_rss=400_000_000, heap_in_memory=200_000_000)
    assert columns == {
        "nmt_mb": 353, "nmt_heap_mb": 268, "nmt_class_mb": 22, "nmt_thread_mb": 1, "nmt_code_mb": 8,
        "nmt_gc_mb": 49, "nmt_other_mb": 0, "nmt_rest_mb": 4, "heap_resident_mb": 200,
        "untracked_mb": 116,  # 400 - (353 - 268 + 200)
    }  # fmt: skip
    unknown_heap = native_columns(native_memory(SUMMARY), jvm_rss=400_000_000, heap_in_memory=None)
    assert unknown_heap["heap_resident_mb"] is None
    assert unknown_heap["untracked_mb"] == 47  # 400 - 353: the heap taken as committed


def test_a_jvm_without_nmt_gives_empty_columns() -> None:
    assert native_memory(WITHOUT_NMT) == {}
    assert native_memory("") == {}  # jcmd failed or timed out
    assert set(native_columns({}, jvm_rss=400_000_000, heap_in_memory=None).values()) == {None}


def test_the_heap_range_from_each_collectors_heap_info() -> None:
    assert heap_range(G1_HEAP_INFO) == (0xF0000000, 0x100000000)
    assert heap_range(PARALLEL_HEAP_INFO) == (0xF8000000, 0x100000000)  # the old generation below the young
    assert heap_range("9065:\n") is None
