// The JDBC check of compat/jdbc_test.go: the PostgreSQL JDBC driver (pgjdbc)
// as an application uses it, printing what it sees; run through a coordinator
// and against plain PostgreSQL (PLAIN=1: no Citus calls), the two must print
// the same.
import java.math.BigDecimal;
import java.sql.*;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.*;
import javax.sql.XAConnection;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;
import org.postgresql.xa.PGXADataSource;

public class JdbcCheck {
    static boolean plain = System.getenv("PLAIN") != null;

    static void p(String k, Object v) {
        System.out.println(k + ": " + v);
    }

    static String rows(ResultSet rs) throws SQLException {
        StringBuilder b = new StringBuilder();
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            b.append('[');
            for (int i = 1; i <= n; i++) {
                if (i > 1) b.append(',');
                Object o = rs.getObject(i);
                if (o instanceof Array) o = Arrays.toString((Object[]) ((Array) o).getArray());
                b.append(o);
            }
            b.append(']');
        }
        rs.close();
        return b.toString();
    }

    static String err(SQLException e) {
        String s = e.getSQLState();
        if (e instanceof PSQLException) {
            ServerErrorMessage m = ((PSQLException) e).getServerErrorMessage();
            if (m != null) s += " table=" + m.getTable() + " constraint=" + m.getConstraint() + " column=" + m.getColumn();
        }
        return s;
    }

    static class X implements Xid {
        byte[] g;
        X(String s) { g = s.getBytes(); }
        public int getFormatId() { return 4660; }
        public byte[] getGlobalTransactionId() { return g; }
        public byte[] getBranchQualifier() { return new byte[] {1}; }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        Properties props = new Properties();
        props.setProperty("user", "postgres");
        Connection c = DriverManager.getConnection(url, props);
        Statement s = c.createStatement();
        s.execute("DROP TABLE IF EXISTS jevents, jaccounts, jbranches");
        s.execute("CREATE TABLE jbranches (bid int PRIMARY KEY, name text NOT NULL)");
        s.execute("CREATE TABLE jaccounts (aid bigint PRIMARY KEY, bid int NOT NULL, balance numeric(12,2) NOT NULL,"
                + " note text, created timestamptz, tags text[], CHECK (balance >= 0))");
        s.execute("CREATE TABLE jevents (id bigserial, aid bigint NOT NULL, what text, PRIMARY KEY (aid, id))");
        if (!plain) {
            // A driver's parameters: varchar-typed strings.
            PreparedStatement d = c.prepareStatement("SELECT create_distributed_table(?, ?)");
            d.setString(1, "jaccounts");
            d.setString(2, "aid");
            d.execute();
            d.setString(1, "jevents");
            d.setString(2, "aid");
            d.execute();
            s.execute("SELECT create_reference_table('jbranches')");
        }
        s.executeUpdate("INSERT INTO jbranches VALUES (1, 'north'), (2, 'south'), (3, 'east')");

        // Batches in a transaction, the driver's plain form.
        c.setAutoCommit(false);
        PreparedStatement ins = c.prepareStatement(
                "INSERT INTO jaccounts (aid, bid, balance, note, created, tags) VALUES (?, ?, ?, ?, ?, ?)");
        OffsetDateTime t0 = OffsetDateTime.of(2026, 1, 2, 3, 4, 5, 0, ZoneOffset.UTC);
        for (int i = 1; i <= 200; i++) {
            ins.setLong(1, i);
            ins.setInt(2, i % 3 + 1);
            ins.setBigDecimal(3, new BigDecimal(i * 10).add(new BigDecimal("0.25")));
            ins.setString(4, i % 7 == 0 ? null : "note " + i);
            ins.setObject(5, t0.plusHours(i));
            ins.setArray(6, c.createArrayOf("text", new String[] {"t" + (i % 4), "x"}));
            ins.addBatch();
        }
        int[] counts = ins.executeBatch();
        c.commit();
        p("batch", counts.length + " " + Arrays.stream(counts).sum());
        c.setAutoCommit(true);

        // The same with reWriteBatchedInserts (multi-row VALUES).
        Properties rw = new Properties(props);
        rw.setProperty("reWriteBatchedInserts", "true");
        try (Connection c2 = DriverManager.getConnection(url, rw)) {
            PreparedStatement i2 = c2.prepareStatement("INSERT INTO jaccounts (aid, bid, balance) VALUES (?, ?, ?)");
            for (int i = 201; i <= 300; i++) {
                i2.setLong(1, i);
                i2.setInt(2, 1);
                i2.setBigDecimal(3, BigDecimal.ONE);
                i2.addBatch();
            }
            int[] k = i2.executeBatch();
            p("rewritten batch", k.length);
        }

        // Point reads past prepareThreshold: named statements, binary results.
        PreparedStatement pt = c.prepareStatement("SELECT bid, balance, note, created, tags FROM jaccounts WHERE aid = ?");
        StringBuilder pr = new StringBuilder();
        for (int i = 1; i <= 12; i++) {
            pt.setLong(1, i * 13);
            pr.append(rows(pt.executeQuery()));
        }
        p("point reads", pr);
        PreparedStatement pi = c.prepareStatement("SELECT aid, balance FROM jaccounts WHERE aid = ?");
        pr.setLength(0);
        for (int i = 1; i <= 8; i++) {
            pi.setInt(1, i * 17); // int4 parameter for a bigint key
            pr.append(rows(pi.executeQuery()));
        }
        p("int4 key", pr);
        PreparedStatement ps = c.prepareStatement("SELECT aid FROM jaccounts WHERE aid = ?::bigint");
        ps.setString(1, "42");
        p("varchar key", rows(ps.executeQuery()));
        PreparedStatement po = c.prepareStatement("SELECT aid, note FROM jaccounts WHERE aid = ?");
        po.setObject(1, 77L);
        p("setObject key", rows(po.executeQuery()));

        // Reference-table join, = ANY(array).
        PreparedStatement j = c.prepareStatement(
                "SELECT a.aid, b.name FROM jaccounts a JOIN jbranches b ON a.bid = b.bid WHERE a.aid = ANY(?) ORDER BY a.aid");
        j.setArray(1, c.createArrayOf("bigint", new Long[] {5L, 150L, 99L, 1000L}));
        p("join any", rows(j.executeQuery()));

        // Aggregates over every shard.
        p("group", rows(s.executeQuery(
                "SELECT bid, count(*), sum(balance), min(note), max(created) FROM jaccounts GROUP BY bid ORDER BY bid")));
        PreparedStatement agg = c.prepareStatement("SELECT count(*), avg(balance) FROM jaccounts WHERE bid = ? AND aid <= ?");
        agg.setInt(1, 2);
        agg.setLong(2, 150);
        p("agg params", rows(agg.executeQuery()));

        // Fetch size: a cursor-like read in parts, in a transaction.
        c.setAutoCommit(false);
        Statement fs = c.createStatement();
        fs.setFetchSize(7);
        ResultSet rs = fs.executeQuery("SELECT aid, balance FROM jaccounts ORDER BY aid");
        long n = 0, sum = 0;
        while (rs.next()) {
            n++;
            sum += rs.getLong(1);
        }
        rs.close();
        PreparedStatement fp = c.prepareStatement("SELECT aid FROM jaccounts WHERE bid = ? ORDER BY aid DESC");
        fp.setFetchSize(5);
        fp.setInt(1, 3);
        p("fetch size", n + " " + sum + " " + rows(fp.executeQuery()).length());
        c.commit();

        // A transfer over two shards, a failed statement under a savepoint.
        PreparedStatement up = c.prepareStatement("UPDATE jaccounts SET balance = balance + ? WHERE aid = ?");
        up.setBigDecimal(1, new BigDecimal("-5.25"));
        up.setLong(2, 10);
        up.executeUpdate();
        up.setBigDecimal(1, new BigDecimal("5.25"));
        up.setLong(2, 11);
        up.executeUpdate();
        Savepoint sp = c.setSavepoint();
        try {
            s.executeUpdate("INSERT INTO jaccounts (aid, bid, balance) VALUES (12, 1, 0)");
            p("duplicate", "no error");
        } catch (SQLException e) {
            p("duplicate", err(e));
            c.rollback(sp);
        }
        try {
            up.setBigDecimal(1, new BigDecimal("-100000"));
            up.setLong(2, 13);
            up.executeUpdate();
            p("check", "no error");
        } catch (SQLException e) {
            p("check", err(e));
            c.rollback(sp);
        }
        c.commit();
        p("transfer", rows(s.executeQuery("SELECT aid, balance FROM jaccounts WHERE aid IN (10, 11, 12, 13) ORDER BY aid")));

        // A transaction that fails and rolls back as a whole.
        up.setBigDecimal(1, BigDecimal.TEN);
        up.setLong(2, 20);
        up.executeUpdate();
        up.setLong(2, 120);
        up.executeUpdate();
        c.rollback();
        c.setAutoCommit(true);
        p("rolled back", rows(s.executeQuery("SELECT aid, balance FROM jaccounts WHERE aid IN (20, 120) ORDER BY aid")));

        // Generated keys: the driver appends RETURNING *.
        PreparedStatement gk = c.prepareStatement("INSERT INTO jevents (aid, what) VALUES (?, ?)", Statement.RETURN_GENERATED_KEYS);
        StringBuilder g = new StringBuilder();
        for (int i = 1; i <= 6; i++) {
            gk.setLong(1, i * 31);
            gk.setString(2, "e" + i);
            gk.executeUpdate();
            ResultSet k = gk.getGeneratedKeys();
            while (k.next()) g.append(k.getLong("aid")).append('/').append(k.getString("what")).append('/').append(k.getLong("id") > 0).append(' ');
        }
        p("generated keys", g);

        // Upsert and DELETE ... RETURNING over shards.
        PreparedStatement ups = c.prepareStatement(
                "INSERT INTO jaccounts (aid, bid, balance) VALUES (?, 1, ?) ON CONFLICT (aid) DO UPDATE SET balance = jaccounts.balance + excluded.balance RETURNING aid, balance");
        ups.setLong(1, 30);
        ups.setBigDecimal(2, new BigDecimal("1.5"));
        p("upsert existing", rows(ups.executeQuery()));
        ups.setLong(1, 5000);
        p("upsert new", rows(ups.executeQuery()));
        p("delete", s.executeUpdate("DELETE FROM jaccounts WHERE aid > 250 AND aid <= 300"));

        // Several statements in one execute.
        boolean isRs = s.execute("UPDATE jaccounts SET note = 'multi' WHERE aid = 1; SELECT note FROM jaccounts WHERE aid = 1");
        StringBuilder m = new StringBuilder();
        m.append(isRs).append(' ').append(s.getUpdateCount());
        if (s.getMoreResults()) m.append(' ').append(rows(s.getResultSet()));
        p("multi", m);

        // Metadata as ORMs read it.
        DatabaseMetaData md = c.getMetaData();
        p("tables", rows(md.getTables(null, "public", "j%", new String[] {"TABLE"})).replaceAll("null", "-"));
        ResultSet cols = md.getColumns(null, "public", "jaccounts", null);
        StringBuilder cb = new StringBuilder();
        while (cols.next()) cb.append(cols.getString("COLUMN_NAME")).append(':').append(cols.getString("TYPE_NAME")).append(' ');
        p("columns", cb);
        ResultSet pk = md.getPrimaryKeys(null, "public", "jevents");
        StringBuilder pb = new StringBuilder();
        while (pk.next()) pb.append(pk.getString("COLUMN_NAME")).append(' ');
        p("primary key", pb);
        ResultSet ix = md.getIndexInfo(null, "public", "jaccounts", false, false);
        StringBuilder ib = new StringBuilder();
        while (ix.next()) ib.append(ix.getString("INDEX_NAME")).append(' ');
        p("indexes", ib);

        // Isolation and read-only, as the driver sets them.
        c.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
        c.setAutoCommit(false);
        p("repeatable read", rows(s.executeQuery("SELECT current_setting('transaction_isolation'), count(*) FROM jaccounts WHERE aid = 3")));
        c.commit();
        c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
        c.setReadOnly(true);
        try {
            s.executeUpdate("UPDATE jaccounts SET note = 'ro' WHERE aid = 2");
            p("read only", "no error");
        } catch (SQLException e) {
            p("read only", err(e));
        }
        c.rollback();
        c.setReadOnly(false);
        c.setAutoCommit(true);
        p("isolation after", rows(s.executeQuery("SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')")));

        // Cancel and query timeout.
        Statement sl = c.createStatement();
        Thread th = new Thread(() -> {
            try { Thread.sleep(500); sl.cancel(); } catch (Exception e) { }
        });
        th.start();
        try {
            sl.executeQuery("SELECT pg_sleep(20)");
            p("cancel", "no error");
        } catch (SQLException e) {
            p("cancel", e.getSQLState());
        }
        th.join();
        sl.setQueryTimeout(1);
        try {
            sl.executeQuery("SELECT count(*) FROM jaccounts, pg_sleep(5)");
            p("timeout", "no error");
        } catch (SQLException e) {
            p("timeout", e.getSQLState());
        }
        p("after cancel", rows(s.executeQuery("SELECT count(*) FROM jaccounts")));

        // XA: two-phase commit driven by a transaction manager, and recovery.
        PGXADataSource xds = new PGXADataSource();
        xds.setURL(url);
        xds.setUser("postgres");
        XAConnection xc = xds.getXAConnection();
        XAResource xr = xc.getXAResource();
        Connection xcon = xc.getConnection();
        Xid x1 = new X("jdbc-check-1");
        xr.start(x1, XAResource.TMNOFLAGS);
        PreparedStatement xu = xcon.prepareStatement("UPDATE jaccounts SET balance = balance + 1 WHERE aid = ?");
        xu.setLong(1, 40);
        xu.executeUpdate();
        xr.end(x1, XAResource.TMSUCCESS);
        p("xa prepare", xr.prepare(x1) == XAResource.XA_OK);
        xr.commit(x1, false);
        Xid x2 = new X("jdbc-check-2");
        xr.start(x2, XAResource.TMNOFLAGS);
        xu.setLong(1, 41);
        xu.executeUpdate();
        xr.end(x2, XAResource.TMSUCCESS);
        xr.prepare(x2);
        Xid[] found = xr.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
        int mine = 0;
        for (Xid f : found) {
            if (new String(f.getGlobalTransactionId()).startsWith("jdbc-check-")) {
                mine++;
                xr.rollback(f);
            }
        }
        p("xa recover", mine);
        p("xa rows", rows(s.executeQuery("SELECT aid, balance FROM jaccounts WHERE aid IN (40, 41) ORDER BY aid")));
        xc.close();

        // A batch that fails midway in autocommit: one pipeline, one implicit
        // transaction, so none of it stays.
        PreparedStatement fb = c.prepareStatement("INSERT INTO jaccounts (aid, bid, balance) VALUES (?, 2, 1)");
        for (long a : new long[] {7001, 7002, 7003, 7004, 7005, 30, 7006}) {
            fb.setLong(1, a);
            fb.addBatch();
        }
        try {
            fb.executeBatch();
            p("failed batch", "no error");
        } catch (BatchUpdateException e) {
            p("failed batch", e.getSQLState() + " " + rows(s.executeQuery("SELECT count(*) FROM jaccounts WHERE aid BETWEEN 7001 AND 7006")));
        }

        // The simple protocol with the driver's own literals (preferQueryMode=simple,
        // as with PgBouncer in transaction mode).
        Properties sp2 = new Properties(props);
        sp2.setProperty("preferQueryMode", "simple");
        try (Connection c3 = DriverManager.getConnection(url, sp2)) {
            PreparedStatement q = c3.prepareStatement("SELECT aid, balance, created, tags FROM jaccounts WHERE aid = ? OR aid = ? ORDER BY aid");
            q.setLong(1, 3);
            q.setLong(2, 197);
            p("simple mode read", rows(q.executeQuery()));
            c3.setAutoCommit(false);
            PreparedStatement u = c3.prepareStatement("UPDATE jaccounts SET note = ?, created = ? WHERE aid = ?");
            u.setString(1, "it's \\ simple");
            u.setObject(2, OffsetDateTime.of(2026, 6, 1, 12, 0, 0, 0, ZoneOffset.ofHours(-7)));
            u.setLong(3, 3);
            p("simple mode update", u.executeUpdate());
            c3.commit();
            p("simple mode after", rows(c3.createStatement().executeQuery("SELECT note, created FROM jaccounts WHERE aid = 3")));
        }

        // Binary parameters and results from the first execution.
        Properties bp = new Properties(props);
        bp.setProperty("prepareThreshold", "-1");
        try (Connection c4 = DriverManager.getConnection(url, bp)) {
            PreparedStatement q = c4.prepareStatement("SELECT aid, balance, created, tags FROM jaccounts WHERE aid = ? AND created < ?");
            StringBuilder bb = new StringBuilder();
            for (int i = 1; i <= 4; i++) {
                q.setLong(1, i * 50);
                q.setObject(2, OffsetDateTime.of(2027, 1, 1, 0, 0, 0, 0, ZoneOffset.UTC));
                bb.append(rows(q.executeQuery()));
            }
            p("binary", bb);
        }

        p("total", rows(s.executeQuery("SELECT count(*), sum(balance), count(note), sum(array_length(tags, 1)) FROM jaccounts")));
        c.close();
    }
}
