package io.kappa.fs;

/**
 * Hadoop's checksummed local file system over {@link RawLocalFileSystem}: no process per file attribute.
 * Spark's sessions use it for file:// paths ({@code spark.hadoop.fs.file.impl}).
 */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
  public LocalFileSystem() {
    super(new RawLocalFileSystem());
  }
}
