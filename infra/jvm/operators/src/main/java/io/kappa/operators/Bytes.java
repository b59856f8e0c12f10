package io.kappa.operators;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** Nullable values in the operators' state bytes, and the versioned frame around a state value. */
final class Bytes {
  private Bytes() {}

  /** Reads what follows the format byte. */
  interface Reader<T> {
    T read(DataInputStream in) throws IOException;
  }

  /**
   * Reads a state value written as one {@code format} byte and then the layout {@code reader} reads, all of
   * it: another format, fewer bytes or more bytes than the layout is a clear error naming {@code what}.
   */
  static <T> T decode(String what, int format, byte[] data, Reader<T> reader) {
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(data))) {
      int found = in.readByte();
      if (found != format) {
        throw new IllegalStateException(what + " state format " + found + ", this operator reads " + format);
      }
      T value = reader.read(in);
      if (in.available() > 0) {
        throw new IllegalStateException(
            what + " state of " + data.length + " bytes has " + in.available() + " left over after its format "
                + format + " layout");
      }
      return value;
    } catch (EOFException e) {
      throw new IllegalStateException(
          what + " state truncated or corrupt: its " + data.length + " bytes end inside the format " + format + " layout", e);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static void writeLong(DataOutputStream out, Long value) throws IOException {
    out.writeBoolean(value != null);
    if (value != null) {
      out.writeLong(value);
    }
  }

  static Long readLong(DataInputStream in) throws IOException {
    return in.readBoolean() ? in.readLong() : null;
  }

  static void writeString(DataOutputStream out, String value) throws IOException {
    if (value == null) {
      out.writeInt(-1);
      return;
    }
    byte[] utf8 = value.getBytes(StandardCharsets.UTF_8); // writeUTF stops at 64 KiB
    out.writeInt(utf8.length);
    out.write(utf8);
  }

  static String readString(DataInputStream in) throws IOException {
    int length = in.readInt();
    if (length < 0) {
      return null;
    }
    if (length > in.available()) { // a cut value: say so, rather than allocate what a broken length says
      throw new EOFException();
    }
    byte[] utf8 = new byte[length];
    in.readFully(utf8);
    return new String(utf8, StandardCharsets.UTF_8);
  }

  static void writeStrings(DataOutputStream out, String[] values) throws IOException {
    out.writeInt(values.length);
    for (String s : values) {
      writeString(out, s);
    }
  }

  static String[] readStrings(DataInputStream in) throws IOException {
    int length = in.readInt();
    if (length < 0 || length > in.available() / 4) { // each value takes at least its 4-byte length
      throw new EOFException();
    }
    String[] values = new String[length];
    for (int i = 0; i < values.length; i++) {
      values[i] = readString(in);
    }
    return values;
  }
}
