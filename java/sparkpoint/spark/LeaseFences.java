package sparkpoint.spark;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.fs.Path;

/**
 * The deadlines of the leases this JVM's driver holds, by the locations they cover (a job's
 * checkpoint, its output): Spark's own writes there are refused once the deadline passed.
 *
 * <p>sparkpoint's process renews a job's lease in a home on S3 or HDFS and tells this class
 * the holder's deadline after every renewal ({@code hold}), measured on the monotonic clock
 * both processes share ({@code System.nanoTime}, CLOCK_MONOTONIC). A driver frozen past its
 * deadline (SIGSTOP, a long pause) finds it passed the moment it wakes, before its next
 * write, whatever the Python side has seen yet: no batch is committed after another process
 * may have taken the job. Locations not registered here (other checkpoints, executors in
 * other JVMs) are not fenced.
 */
public final class LeaseFences {

  private static final Map<String, Long> DEADLINES = new ConcurrentHashMap<>();

  private LeaseFences() {}

  /**
   * A location as compared here: scheme, authority and path, a path without a scheme taken
   * as a local file (Spark names a local file sink's log by its plain path, its checkpoint
   * by a {@code file:} URI), without a trailing slash.
   */
  static String key(String location) {
    java.net.URI uri = new Path(location).toUri();
    String scheme = uri.getScheme() == null ? "file" : uri.getScheme().toLowerCase();
    String authority = uri.getAuthority();
    String path = uri.getPath() == null ? "" : uri.getPath();
    while (path.length() > 1 && path.endsWith("/")) {
      path = path.substring(0, path.length() - 1);
    }
    return scheme + ":" + (authority == null || authority.isEmpty() ? "" : "//" + authority)
        + path;
  }

  /** Writes under {@code location} are allowed for {@code remainingNanos} from now. */
  public static void hold(String location, long remainingNanos) {
    DEADLINES.put(key(location), System.nanoTime() + remainingNanos);
  }

  /** No write under {@code location} is allowed any more (the lease was lost). */
  public static void revoke(String location) {
    DEADLINES.put(key(location), System.nanoTime() - 1);
  }

  /** {@code location} is no longer fenced (the holder let go, its query has stopped). */
  public static void forget(String location) {
    DEADLINES.remove(key(location));
  }

  /** Whether a write at {@code path} would be refused now. */
  public static boolean refuses(Path path) {
    String target = key(path.toString());
    long now = System.nanoTime();
    for (Map.Entry<String, Long> entry : DEADLINES.entrySet()) {
      String prefix = entry.getKey();
      boolean under = target.equals(prefix) || target.startsWith(prefix + "/");
      if (under && now - entry.getValue() >= 0) {
        return true;
      }
    }
    return false;
  }

  /** Throw unless a write at {@code path} is allowed. */
  public static void check(Path path) throws IOException {
    if (refuses(path)) {
      throw new IOException("sparkpoint: refused to write " + path + ": this process no "
          + "longer holds the job's lease (not renewed in time, or taken by another process); "
          + "LEASE_LOST");
    }
  }
}
