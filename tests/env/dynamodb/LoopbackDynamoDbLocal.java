// Starts DynamoDB Local bound to 127.0.0.1 only.
//
// DynamoDB Local has no host option and its Jetty server listens on every interface;
// the server object is private, so we reach it by reflection and set the connector host
// before start. If a DynamoDB Local upgrade renames the field, this fails loudly at start.
import com.amazonaws.services.dynamodbv2.local.main.ServerRunner;
import com.amazonaws.services.dynamodbv2.local.server.DynamoDBProxyServer;
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class LoopbackDynamoDbLocal {
    private static final String LOOPBACK = "127.0.0.1";

    public static void main(String[] args) throws Exception {
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server jetty = (Server) field.get(proxy);
        for (Connector connector : jetty.getConnectors()) {
            ((ServerConnector) connector).setHost(LOOPBACK);
        }
        proxy.start();
        proxy.join();
    }
}
