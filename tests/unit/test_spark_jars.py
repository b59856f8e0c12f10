from pathlib import Path

from kappa.spark.session import artifact_name, connector_jars


def test_artifact_name_strips_the_version() -> None:
    assert artifact_name("jackson-core-2.13.5.jar") == "jackson-core"
    assert artifact_name("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert artifact_name("delta-spark_4.2_2.13-4.4.0.jar") == "delta-spark_4.2_2.13"
    assert artifact_name("zstd-jni-1.5.7-3.jar") == "zstd-jni"


def test_spark_keeps_its_own_copy_of_shared_libraries(tmp_path: Path) -> None:
    spark_jars, connectors = tmp_path / "spark", tmp_path / "connectors"
    spark_jars.mkdir()
    connectors.mkdir()
    for name in ("jackson-core-2.18.2.jar", "scala-library-2.13.16.jar"):
        (spark_jars / name).touch()
    for name in ("jackson-core-2.13.5.jar", "scala-library-2.13.17.jar", "delta-spark_4.2_2.13-4.4.0.jar"):
        (connectors / name).touch()
    assert [p.name for p in connector_jars(connectors, spark_jars)] == ["delta-spark_4.2_2.13-4.4.0.jar"]
