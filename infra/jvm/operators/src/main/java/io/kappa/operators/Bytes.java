package io.kappa.operators;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/** Nullable values in the operators' state bytes. */
final class Bytes {
  private Bytes() {}

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
    String[] values = new String[in.readInt()];
    for (int i = 0; i < values.length; i++) {
      values[i] = readString(in);
    }
    return values;
  }
}
