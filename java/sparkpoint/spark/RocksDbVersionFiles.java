package sparkpoint.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipOutputStream;

/** A RocksDB checkpoint packed as Spark's {@code RocksDBFileManager} commits a version. */
final class RocksDbVersionFiles {
  private RocksDbVersionFiles() {}

  /**
   * Spark's layout of one committed version in {@code staging}: each SST of the RocksDB
   * checkpoint under {@code SSTs/} with a unique name (a hard link to the checkpoint's file
   * when the file system allows), the other files and {@code metadata} in
   * {@code <version>.zip}; {@code metadata} gets the SST list and loses the archived WAL
   * files (a fresh checkpoint has none).
   */
  static void pack(ObjectMapper json, Path checkpoint, Path staging, long version,
      ObjectNode metadata) throws IOException {
    Path ssts = Files.createDirectory(staging.resolve("SSTs"));
    ArrayNode listed = json.createArrayNode();
    List<Path> others = new ArrayList<>();
    List<Path> files;
    try (Stream<Path> entries = Files.list(checkpoint)) {
      files = entries.sorted().toList();
    }
    for (Path path : files) {
      String name = path.getFileName().toString();
      if (name.endsWith(".sst")) {
        String dfsName = name.substring(0, name.length() - 4) + "-" + UUID.randomUUID()
            + ".sst";
        Path source = path.toRealPath();
        try {
          Files.createLink(ssts.resolve(dfsName), source);
        } catch (IOException | UnsupportedOperationException e) {
          Files.copy(source, ssts.resolve(dfsName));
        }
        ObjectNode entry = listed.addObject();
        entry.put("localFileName", name);
        entry.put("dfsSstFileName", dfsName);
        entry.put("sizeBytes", Files.size(source));
      } else if (Files.isRegularFile(path)) {
        others.add(path);
      }
    }
    metadata.set("sstFiles", listed);
    metadata.remove("logFiles");
    Path zip = staging.resolve(version + ".zip");
    try (OutputStream out = Files.newOutputStream(zip);
        ZipOutputStream archive = new ZipOutputStream(out)) {
      for (Path path : others) {
        archive.putNextEntry(new ZipEntry(path.getFileName().toString()));
        Files.copy(path, archive);
        archive.closeEntry();
      }
      archive.putNextEntry(new ZipEntry("metadata"));
      archive.write(("v1\n" + json.writeValueAsString(metadata))
          .getBytes(StandardCharsets.UTF_8));
      archive.closeEntry();
    }
  }

  /** Every entry of {@code staging} moved into {@code directory}. */
  static void moveAll(Path staging, Path directory) throws IOException {
    try (Stream<Path> entries = Files.list(staging)) {
      for (Path entry : (Iterable<Path>) entries::iterator) {
        Files.move(entry, directory.resolve(entry.getFileName()));
      }
    }
  }

  static void deleteTree(Path root) throws IOException {
    if (!Files.exists(root, LinkOption.NOFOLLOW_LINKS)) {
      return;
    }
    if (!Files.isDirectory(root, LinkOption.NOFOLLOW_LINKS)) {
      Files.delete(root);
      return;
    }
    Files.walkFileTree(root, new SimpleFileVisitor<>() {
      @Override
      public FileVisitResult visitFile(Path file, BasicFileAttributes attrs)
          throws IOException {
        Files.delete(file);
        return FileVisitResult.CONTINUE;
      }

      @Override
      public FileVisitResult postVisitDirectory(Path dir, IOException e) throws IOException {
        if (e != null) {
          throw new UncheckedIOException(e);
        }
        Files.delete(dir);
        return FileVisitResult.CONTINUE;
      }
    });
  }
}
