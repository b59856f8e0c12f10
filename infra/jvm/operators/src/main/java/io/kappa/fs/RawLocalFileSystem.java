package io.kappa.fs;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system, with the file attributes read and set through java.nio instead of a process.
 *
 * <p>Without Hadoop's native library (no wheel ships it), {@code RawLocalFileSystem} runs {@code chmod} after
 * every file it creates and {@code readlink} for every link status it reads (every rename through a
 * FileContext, which Spark's checkpoints and Delta's log use). A job host wrote its offset, commit and state
 * files through about 25 such processes a second at 1,000 clicks/s (strace), each a fork of the JVM, its
 * wait, and a process start. Same answers, no process.
 */
public class RawLocalFileSystem extends org.apache.hadoop.fs.RawLocalFileSystem {

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException(p.toString());
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    return status(f, false);
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    return status(f, true);
  }

  @Override
  public Path getLinkTarget(Path f) throws IOException {
    FileStatus fi = getFileLinkStatus(f);
    if (fi.isSymlink()) {
      return fi.getSymlink();
    }
    throw new IOException("Path " + f + " is not a symbolic link");
  }

  private FileStatus status(Path f, boolean follow) throws IOException {
    File file = pathToFile(f);
    LinkOption[] options = follow ? new LinkOption[0] : new LinkOption[] {LinkOption.NOFOLLOW_LINKS};
    PosixFileAttributes a;
    try {
      a = Files.readAttributes(file.toPath(), PosixFileAttributes.class, options);
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + f + " does not exist");
    }
    Path link = a.isSymbolicLink() ? new Path(Files.readSymbolicLink(file.toPath()).toString()) : null;
    return new FileStatus(
        a.isDirectory() || a.isSymbolicLink() ? 0 : a.size(),
        a.isDirectory(),
        1,
        getDefaultBlockSize(f),
        a.lastModifiedTime().toMillis(),
        a.lastAccessTime().toMillis(),
        new FsPermission(mode(a.permissions())),
        a.owner().getName(),
        a.group().getName(),
        link,
        f.makeQualified(getUri(), getWorkingDirectory()));
  }

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        set.add(BITS[bit]);
      }
    }
    return set;
  }

  static short mode(Set<PosixFilePermission> permissions) {
    short mode = 0;
    for (int bit = 0; bit < BITS.length; bit++) {
      if (permissions.contains(BITS[bit])) {
        mode |= (short) (1 << bit);
      }
    }
    return mode;
  }
}
